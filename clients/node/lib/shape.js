// The native side returns the Rust reports in their serde shape
// (snake_case); JavaScript callers get camelCase keys, as the seed's own
// types use.

/** A deep copy of `value` with every object key in camelCase. */
export function camel(value) {
  if (Array.isArray(value)) return value.map(camel);
  if (value === null || typeof value !== "object") return value;
  const out = {};
  for (const [key, inner] of Object.entries(value)) {
    out[key.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase())] = camel(inner);
  }
  return out;
}

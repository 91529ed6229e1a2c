// A cap on this provisioner's calls in flight. The daemon answers a
// request over its per-connection cap (`max_requests_per_connection`,
// 64 by default) at once with "server throttled the request" instead of
// queueing it, and every call of one provisioner shares one connection;
// a control plane that fires 200 ensures at once would see most of them
// refused. So the calls past the cap wait here, in order, instead.

/** The default cap: half the daemon's default, leaving room for other callers' diagnostics. */
export const DEFAULT_MAX_IN_FLIGHT = 32;

/**
 * The cap on long-polls in flight (a command's output and its wait), kept
 * apart from the calls' cap so followers of quiet commands never hold a
 * runner call back; with the default calls' cap, 56 of the daemon's 64.
 * A follower past it waits its turn, at most one poll's wait.
 */
export const MAX_POLLS_IN_FLIGHT = 24;

/** The cap from `$SANDBOXD_MAX_IN_FLIGHT`, else the default; a bad value is an error naming it. */
export function maxInFlightFromEnv() {
  const raw = process.env.SANDBOXD_MAX_IN_FLIGHT;
  if (raw === undefined || raw === "") return DEFAULT_MAX_IN_FLIGHT;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 1) {
    throw new Error(`SANDBOXD_MAX_IN_FLIGHT must be a whole number of at least 1, not ${JSON.stringify(raw)}`);
  }
  return value;
}

/** Runs at most `max` of the functions given to it at a time, the rest first come, first served. */
export function limiter(max) {
  let running = 0;
  const waiting = [];
  const release = () => {
    running -= 1;
    const next = waiting.shift();
    if (next !== undefined) next();
  };
  return async function limited(run) {
    if (running >= max) {
      await new Promise((resolve) => waiting.push(resolve));
    }
    running += 1;
    try {
      return await run();
    } finally {
      release();
    }
  };
}

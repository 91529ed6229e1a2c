// Test support, kept outside test/ so `node --test test/` does not run it as a test file.
// The seed's selection function, newSandboxProvisioner from
// @stigmer/server src/sandbox/provisioner.ts (reference/seeds, 3.14.0-dev),
// its body kept as the seed has it with the types removed, so the tests
// select this driver exactly as the control plane does.
export function newSandboxProvisioner(type, options, builtInFactories, registeredFactories) {
  if (type === "") {
    return undefined;
  }
  const factory = builtInFactories.get(type) ?? registeredFactories.get(type);
  if (factory === undefined) {
    const known = [...builtInFactories.keys(), ...registeredFactories.keys()].sort();
    throw new Error(
      `unknown sandbox provisioner type '${type}' — known types: '${known.join("', '")}'`,
    );
  }
  return factory(options);
}

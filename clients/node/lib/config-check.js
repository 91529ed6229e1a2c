// How the control plane's SandboxDriverConfig relates to the daemon's own
// configuration. Endpoints, images and commands are the DAEMON's: it
// launches every runner from its own config file, and the values the
// control plane holds change nothing there. So the driver compares what
// it can against the daemon's `status` and warns once, at construction,
// where they differ, so an operator who set SANDBOX_RUNNER_IMAGE on the
// control plane learns that the daemon runs another one.
//
// `status` reports the runner command (process tier), the runner image
// (container tiers) and the namespace (kubernetes tier) in its
// `driver_health` line, and the backend endpoint and Temporal address
// every runner is given in `runner_endpoints` (protocol 6).

/** The differences between `config` and what `status` reports, as readable lines. */
export function configDifferences(config, status) {
  const health = status.driver_health ?? "";
  const differences = [];
  const field = (pattern) => pattern.exec(health)?.[1];

  if (status.driver === "local-process" && nonEmpty(config.runnerCommand)) {
    const daemons = field(/^runner (\S+?)(?:;|$)/);
    if (daemons !== undefined && !sameCommand(config.runnerCommand, daemons)) {
      differences.push(
        `runnerCommand: the control plane has ${JSON.stringify(config.runnerCommand)}, the daemon runs ${JSON.stringify(daemons)}`,
      );
    }
  }
  if (status.driver === "docker" || status.driver === "kubernetes") {
    const image = field(/runner image (\S+?)(?:;|$)/);
    if (nonEmpty(config.runnerImage) && image !== undefined && image !== config.runnerImage) {
      differences.push(
        `runnerImage: the control plane has ${JSON.stringify(config.runnerImage)}, the daemon runs ${JSON.stringify(image)}`,
      );
    }
  }
  if (status.driver === "kubernetes" && nonEmpty(config.kubernetesNamespace)) {
    const namespace = field(/namespace (\S+?);/);
    if (namespace !== undefined && namespace !== config.kubernetesNamespace) {
      differences.push(
        `kubernetesNamespace: the control plane has ${JSON.stringify(config.kubernetesNamespace)}, the daemon provisions into ${JSON.stringify(namespace)}`,
      );
    }
  }
  const endpoints = status.runner_endpoints ?? {};
  for (const [name, daemonKey, what] of [
    ["backendEndpoint", "backend_endpoint", "STIGMER_BACKEND_ENDPOINT"],
    ["temporalAddress", "temporal_address", "TEMPORAL_SERVICE_ADDRESS"],
  ]) {
    const daemons = endpoints[daemonKey];
    if (nonEmpty(config[name]) && typeof daemons === "string" && daemons !== config[name]) {
      const given = daemons === "" ? "gives runners none" : `gives runners ${JSON.stringify(daemons)}`;
      differences.push(
        `${name}: the control plane has ${JSON.stringify(config[name])}, the daemon ${given} (${what})`,
      );
    }
  }
  return differences;
}

function nonEmpty(value) {
  return typeof value === "string" && value !== "";
}

/** A bare command name matches the daemon's resolved path by its last component. */
function sameCommand(configured, resolved) {
  if (configured.includes("/")) return configured === resolved;
  return resolved.split("/").pop() === configured;
}

// Selection through the seed's own mechanism, and the config comparison.
import { test } from "node:test";
import assert from "node:assert/strict";

import {
  configDifferences,
  newSandboxdProvisioner,
  sandboxdExtension,
  SANDBOXD_PROVISIONER_TYPE,
} from "../index.js";
import { newSandboxProvisioner } from "../testing/seed-select.mjs";
import { emptyConfig, recordingLogger, waitFor } from "../testing/helpers.mjs";

test("the extension unit registers `sandboxd`, and the seed's selection constructs it", async () => {
  assert.equal(sandboxdExtension.name, "sandboxd");
  const registered = sandboxdExtension.drivers.sandboxProvisionerDrivers;
  assert.equal(registered.get(SANDBOXD_PROVISIONER_TYPE), newSandboxdProvisioner);

  const logger = recordingLogger();
  const driver = newSandboxProvisioner(
    "sandboxd",
    { config: emptyConfig, logger },
    new Map(),
    registered,
  );
  assert.equal(await driver.probe("session", "never-ensured"), "absent");
  assert.throws(
    () => newSandboxProvisioner("sandbox-d", { config: emptyConfig, logger }, new Map(), registered),
    /unknown sandbox provisioner type 'sandbox-d' — known types: 'sandboxd'/,
  );
});

test("the driver warns once when the control plane's config differs from the daemon's", async () => {
  const logger = recordingLogger();
  const config = {
    ...emptyConfig,
    runnerCommand: "/opt/stigmer/runner-that-is-not-the-daemons",
    temporalAddress: "temporal.control-plane.example:7233",
  };
  const driver = newSandboxdProvisioner({ config, logger });
  const warning = await waitFor(
    () => logger.lines.find((line) => line.level === "warn"),
    10_000,
    "the config warning",
  );
  assert.match(warning.fields.differences, /runnerCommand: the control plane has/);
  // The test daemon gives its runners no Temporal address: that differs too.
  assert.match(
    warning.fields.differences,
    /temporalAddress: the control plane has "temporal\.control-plane\.example:7233", the daemon gives runners none/,
  );
  // Once: later calls do not repeat it.
  await driver.status();
  await driver.probe("session", "x");
  assert.equal(logger.lines.filter((line) => line.level === "warn").length, 1);
});

test("configDifferences compares what status reports, tier by tier", () => {
  const local = { driver: "local-process", driver_health: "runner /usr/bin/runner; runs as uid; group reaper running" };
  assert.deepEqual(configDifferences({ ...emptyConfig, runnerCommand: "runner" }, local), []);
  assert.deepEqual(configDifferences({ ...emptyConfig, runnerCommand: "/usr/bin/runner" }, local), []);
  assert.equal(configDifferences({ ...emptyConfig, runnerCommand: "other" }, local).length, 1);
  // Unset values are not compared: the daemon's own apply.
  assert.deepEqual(configDifferences(emptyConfig, local), []);

  const docker = { driver: "docker", driver_health: "engine unix:///var/run/docker.sock reachable (Docker 27, API 1.47); runner image stigmer/runner:1" };
  assert.deepEqual(configDifferences({ ...emptyConfig, runnerImage: "stigmer/runner:1" }, docker), []);
  assert.match(
    configDifferences({ ...emptyConfig, runnerImage: "stigmer/runner:2" }, docker)[0],
    /runnerImage: the control plane has "stigmer\/runner:2", the daemon runs "stigmer\/runner:1"/,
  );

  const k8s = { driver: "kubernetes", driver_health: "API server https://10.0.0.1; namespace stigmer; may create pods; runner image r:1" };
  const both = configDifferences({ ...emptyConfig, runnerImage: "r:2", kubernetesNamespace: "other" }, k8s);
  assert.equal(both.length, 2, JSON.stringify(both));

  // The endpoints every runner is given (protocol 6's runner_endpoints).
  const endpoints = { ...local, runner_endpoints: { backend_endpoint: "https://api:443", temporal_address: "" } };
  assert.deepEqual(configDifferences({ ...emptyConfig, backendEndpoint: "https://api:443" }, endpoints), []);
  const moved = configDifferences({ ...emptyConfig, backendEndpoint: "https://old:443" }, endpoints);
  assert.match(moved[0], /backendEndpoint: the control plane has "https:\/\/old:443", the daemon gives runners "https:\/\/api:443" \(STIGMER_BACKEND_ENDPOINT\)/);
  // An older daemon reports none: nothing is compared.
  assert.deepEqual(configDifferences({ ...emptyConfig, backendEndpoint: "x" }, local), []);
});

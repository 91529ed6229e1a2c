// Beyond the seed's interface: the fenced deprovision and the event
// stream through this package against the real daemon.
import { test } from "node:test";
import assert from "node:assert/strict";

import { provisioner, secretToken, sessionEnv, uniqueId } from "../testing/helpers.mjs";
import { ConflictError, InvalidArgumentError } from "../index.js";

test("a stale replica's fenced deprovision is refused and the sandbox keeps running", async () => {
  const { driver } = provisioner();
  const id = uniqueId("ses-fence");
  const first = await driver.ensure("session", id, sessionEnv(id, secretToken()));
  assert.match(first.uid, /^[0-9a-f]{32}$/);
  await driver.deprovisionSessionSandbox(id);
  const second = await driver.ensure("session", id, sessionEnv(id, secretToken()));
  assert.notEqual(second.uid, first.uid, "a new incarnation gets a new uid");

  // The replica that saw the first incarnation: refused, nothing changed.
  await assert.rejects(driver.deprovisionFenced("session", id, { uid: first.uid }), (error) => {
    assert.ok(error instanceof ConflictError, String(error));
    assert.equal(error.kind, "conflict");
    assert.ok(error.daemonMessage.includes(first.uid), error.daemonMessage);
    return true;
  });
  assert.equal(await driver.probe("session", id), "running");
  await assert.rejects(
    driver.deprovisionFenced("session", id, { generation: -1 }),
    InvalidArgumentError,
  );

  // The one that saw the current incarnation: done; again: still success.
  const expect = { uid: second.uid, generation: second.generation };
  await driver.deprovisionFenced("session", id, expect);
  assert.equal(await driver.probe("session", id), "absent");
  await driver.deprovisionFenced("session", id, expect);
});

test("the event stream yields one sandbox's life, in order, to an async iterator", async () => {
  const { driver } = provisioner();
  const id = uniqueId("ses-events");
  const abort = new AbortController();
  const seen = [];
  // Started before the sandbox exists: it must see everything after.
  const follower = (async () => {
    for await (const item of driver.events({ scope: "session", id, signal: abort.signal })) {
      assert.equal(item.type, "event", JSON.stringify(item));
      seen.push(item);
      if (item.kind === "deprovisioned") break;
    }
  })();
  const report = await driver.ensure("session", id, sessionEnv(id, secretToken()));
  await driver.deprovisionSessionSandbox(id);
  await follower;
  abort.abort();

  const kinds = seen.map((event) => event.kind);
  assert.deepEqual(kinds.slice(0, 2), ["created", "started"], kinds.join(","));
  assert.equal(kinds.at(-1), "deprovisioned", kinds.join(","));
  for (const event of seen) {
    assert.equal(event.id, id);
    assert.equal(event.scope, "session");
    assert.equal(event.uid, report.uid);
    assert.match(event.cursor, /^[0-9a-f]+-\d+$/);
  }
  // A cursor resumes after its event: nothing before it comes again.
  const resumed = driver.events({ since: seen[0].cursor, scope: "session", id });
  const next = await resumed.next();
  assert.equal(next.value.kind, "started");
  await resumed.return();
  await assert.rejects(
    driver.events({ since: "not-a-cursor" }).next(),
    InvalidArgumentError,
  );
});

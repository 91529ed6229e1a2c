// 200 concurrent ensures of 20 ids from one process start exactly 20
// runners: one connection, multiplexed, and the daemon's per-sandbox
// serialisation make every other ensure a fast path.
import { test } from "node:test";
import assert from "node:assert/strict";

import { provisioner, secretToken, sessionEnv, uniqueId } from "../testing/helpers.mjs";

test("200 concurrent ensures of 20 ids start exactly 20 runners", async () => {
  const { driver } = provisioner();
  const ids = Array.from({ length: 20 }, () => uniqueId("ses-crowd"));
  const token = secretToken();
  const calls = [];
  for (let round = 0; round < 10; round += 1) {
    for (const id of ids) calls.push(driver.ensure("session", id, sessionEnv(id, token)));
  }
  const reports = await Promise.all(calls);
  assert.equal(reports.length, 200);
  assert.equal(reports.filter((report) => report.created).length, 20);

  const mine = (await driver.list("session")).filter((info) => ids.includes(info.id));
  assert.equal(mine.length, 20);
  for (const info of mine) {
    assert.equal(info.state, "running");
    assert.equal(info.generation, 1, `${info.id} was started more than once`);
  }
  // One pid per id, each reported by every ensure of that id.
  for (const id of ids) {
    const pids = new Set(reports.filter((_, i) => ids[i % 20] === id).map((r) => r.pid));
    assert.equal(pids.size, 1, `${id}: ${[...pids]}`);
  }
  await Promise.all(ids.map((id) => driver.deprovisionSessionSandbox(id)));
});

// Commands in a sandbox (protocol 10) through this package against the
// real daemon: runCommand's settled answer, handles with streams that
// follow the output, stdin, attach by tag, signals, fencing, bad input
// and the command events. Each test deprovisions the sandbox it made.
import { test } from "node:test";
import assert from "node:assert/strict";

import { provisioner, secretToken, sessionEnv, uniqueId, waitFor } from "../testing/helpers.mjs";
import {
  ConflictError,
  FailedPreconditionError,
  InvalidArgumentError,
  NotFoundError,
} from "../index.js";

/** A running session sandbox for test `t`, deprovisioned when it ends. */
async function session(t, prefix) {
  const { driver } = provisioner();
  const id = uniqueId(prefix);
  const report = await driver.ensure("session", id, sessionEnv(id, secretToken()));
  t.after(() => driver.deprovisionSessionSandbox(id));
  return { driver, id, report };
}

/** Everything an async iterator of Buffers yields, as text. */
async function text(stream) {
  const parts = [];
  for await (const data of stream) {
    assert.ok(Buffer.isBuffer(data), "each piece is a Buffer");
    parts.push(data);
  }
  return Buffer.concat(parts).toString("utf8");
}

test("runCommand settles with the exit code, the output as text and the proof", async (t) => {
  const { driver, id } = await session(t, "ses-cmd-run");
  const result = await driver.runCommand("session", id, [
    "/bin/sh",
    "-c",
    "echo out; echo err >&2; exit 3",
  ]);
  assert.equal(result.outcome, "exited", JSON.stringify(result));
  assert.equal(result.exitCode, 3);
  assert.equal(result.signal, null);
  assert.equal(result.stdout, "out\n");
  assert.equal(result.stderr, "err\n");
  assert.deepEqual(result.reason, { exited: { code: 3 } });
  assert.equal(result.description, "exited (code 3)");
  assert.equal(result.shellCode, 3);
  assert.deepEqual(result.dropped, { stdout: 0, stderr: 0 });
  assert.deepEqual(result.proof.reason, result.reason);
  assert.deepEqual(result.proof.stdout, { written: 4, dropped: 0 });
  assert.match(result.commandId, /^[0-9a-f]{32}$/);

  const fed = await driver.runCommand("session", id, ["cat"], { stdin: "fed in\n" });
  assert.equal(fed.stdout, "fed in\n");
  assert.equal(fed.stdinError, null);
});

test("a command past its timeout is killed and settled timed-out", async (t) => {
  const { driver, id } = await session(t, "ses-cmd-timeout");
  const result = await driver.runCommand("session", id, ["sleep", "600"], { timeoutMs: 300 });
  assert.equal(result.outcome, "timed-out", JSON.stringify(result));
  assert.equal(result.exitCode, null);
  assert.equal(result.shellCode, 124);
  assert.deepEqual(result.reason, { "timed-out": { limitMs: 300 } });
  assert.equal(result.description, "timed-out (after 300 ms)");
});

test("stdout is followed live, every byte once and in order, while the command runs", async (t) => {
  const { driver, id } = await session(t, "ses-cmd-follow");
  // Prints 5000 lines, waits for a line on stdin, then prints 5000 more:
  // the second half exists only after this side read the first.
  const script =
    'i=0; while [ $i -lt 5000 ]; do echo "line $i"; i=$((i+1)); done; ' +
    'read go; while [ $i -lt 10000 ]; do echo "line $i"; i=$((i+1)); done; echo done >&2';
  const handle = await driver.exec("session", id, ["/bin/sh", "-c", script], { stdin: true });
  const expected = Array.from({ length: 10_000 }, (_, i) => `line ${i}\n`).join("");

  let seen = "";
  let pieces = 0;
  for await (const data of handle.stdout) {
    seen += data.toString("utf8");
    pieces += 1;
    if (seen.endsWith("line 4999\n")) await handle.stdin.write("go\n");
  }
  assert.equal(seen.length, expected.length, "every byte came exactly once");
  assert.equal(seen, expected);
  assert.ok(pieces >= 2, `followed in pieces (${pieces})`);
  assert.equal(handle.stdout.dropped, 0);
  assert.equal(await text(handle.stderr), "done\n");
  const proof = await handle.wait();
  assert.equal(proof.outcome, "exited");
  assert.equal(proof.stdout.written, expected.length);
  // The follower is a cursor at the stream's end: iterating again yields nothing.
  assert.equal(await text(handle.stdout), "");
});

test("bytes the daemon dropped are counted, not hidden", async (t) => {
  const { driver, id } = await session(t, "ses-cmd-dropped");
  // 9 MiB into a store that keeps the latest 8 MiB, read only after the end.
  const handle = await driver.exec("session", id, ["head", "-c", "9437184", "/dev/zero"]);
  const proof = await handle.wait();
  let received = 0;
  let gaps = 0;
  for await (const chunk of handle.stdout.chunks()) {
    received += chunk.data.length;
    if (chunk.dropped > 0) gaps += 1;
  }
  assert.equal(proof.stdout.written, 9437184);
  assert.ok(handle.stdout.dropped > 0, "the oldest bytes were dropped");
  assert.equal(gaps, 1, "one gap, at the start");
  assert.equal(received + handle.stdout.dropped, proof.stdout.written);
});

test("stdin writes arrive in order and end closes it", async (t) => {
  const { driver, id } = await session(t, "ses-cmd-stdin");
  const handle = await driver.exec("session", id, ["cat"], { stdin: true });
  // Not awaited one by one: the handle keeps their order.
  const writes = [
    handle.stdin.write("fed\n"),
    handle.stdin.write(Buffer.from("more\n")),
    handle.stdin.write(new Uint8Array([0x21, 0x0a])),
    handle.stdin.end(),
  ];
  await Promise.all(writes);
  assert.equal(await text(handle.stdout), "fed\nmore\n!\n");
  const proof = await handle.wait();
  assert.equal(proof.outcome, "exited");
  assert.equal(proof.exitCode, 0);
  await assert.rejects(handle.stdin.write("late"), (error) => {
    assert.ok(error instanceof FailedPreconditionError, String(error));
    assert.match(error.daemonMessage, /stdin is not open/, error.daemonMessage);
    return true;
  });
});

test("attach by tag after the first handle is dropped reads the whole output", async (t) => {
  const { driver, id, report } = await session(t, "ses-cmd-attach");
  const tag = "build:1";
  const first = await driver.exec(
    "session",
    id,
    ["/bin/sh", "-c", "echo one; echo two; echo three >&2; exit 7"],
    { tag },
  );
  const firstId = first.commandId;
  assert.equal(first.tag, tag);
  assert.equal(first.uid, report.uid);
  assert.equal(first.generation, report.generation);

  const again = await driver.attach("session", id, { tag });
  assert.equal(again.commandId, firstId);
  assert.equal(again.tag, tag);
  assert.equal(again.pid, first.pid);
  assert.equal(await text(again.stdout), "one\ntwo\n");
  assert.equal(await text(again.stderr), "three\n");
  assert.equal((await again.wait()).exitCode, 7);
  const byId = await driver.attach("session", id, { commandId: firstId });
  assert.equal(await text(byId.stdout), "one\ntwo\n");

  const list = await driver.commands("session", id);
  assert.deepEqual(
    list.map((command) => [command.commandId, command.tag, command.state]),
    [[firstId, tag, "ended"]],
  );
  assert.equal(list[0].proof.outcome, "exited");
  await assert.rejects(driver.attach("session", id, { tag: "no-such-tag" }), NotFoundError);
});

test("a signal by name ends a command signaled", async (t) => {
  const { driver, id } = await session(t, "ses-cmd-signal");
  const handle = await driver.exec("session", id, ["sleep", "600"]);
  await handle.signal("SIGTERM");
  const proof = await handle.wait();
  assert.equal(proof.outcome, "signaled", JSON.stringify(proof));
  assert.equal(proof.signal, 15);
  assert.equal(proof.shellCode, 143);
  await assert.rejects(handle.signal("SIGNOPE"), InvalidArgumentError);
});

test("a terminal's size is set at start and changed by resize", async (t) => {
  const { driver, id } = await session(t, "ses-cmd-pty");
  const script = "stty size; read go; stty size";
  const handle = await driver.exec("session", id, ["/bin/sh", "-c", script], {
    pty: { rows: 24, cols: 80 },
    stdin: true,
  });
  let seen = "";
  let resized = false;
  for await (const data of handle.stdout) {
    seen += data.toString("utf8");
    if (seen.includes("24 80") && !resized) {
      resized = true;
      await handle.resize(40, 100);
      await handle.stdin.write("go\n");
    }
  }
  assert.match(seen, /24 80\r?\n[\s\S]*40 100/, JSON.stringify(seen));
  assert.equal(await text(handle.stderr), "", "a terminal is one stream");
  assert.equal((await handle.wait()).exitCode, 0);
  await assert.rejects(handle.resize(0, 80), InvalidArgumentError);
});

test("a stale expectation is a ConflictError and starts nothing", async (t) => {
  const { driver, id, report } = await session(t, "ses-cmd-fence");
  for (const expect of [{ generation: report.generation + 1 }, { uid: "0".repeat(32) }]) {
    await assert.rejects(
      driver.exec("session", id, ["touch", "started"], { expect }),
      (error) => {
        assert.ok(error instanceof ConflictError, String(error));
        return true;
      },
    );
    await assert.rejects(
      driver.runCommand("session", id, ["touch", "started"], { expect }),
      ConflictError,
    );
  }
  assert.deepEqual(await driver.commands("session", id), []);
  // The current incarnation's expectation is met.
  const expect = { uid: report.uid, generation: report.generation };
  const result = await driver.runCommand("session", id, ["true"], { expect });
  assert.equal(result.outcome, "exited");
});

test("bad input is an InvalidArgumentError naming what was wrong, and starts nothing", async (t) => {
  const { driver, id } = await session(t, "ses-cmd-bad");
  const refused = async (promise, pattern) => {
    await assert.rejects(promise, (error) => {
      assert.ok(error instanceof InvalidArgumentError, String(error));
      assert.match(error.daemonMessage, pattern);
      return true;
    });
  };
  await refused(driver.exec("session", id, []), /^argv must name a program/);
  await refused(driver.runCommand("session", id, ["echo", "a\0b"]), /^argv\[1\] .*NUL/);
  await refused(driver.exec("session", id, "echo hi"), /argv must be an array of strings/);
  await refused(driver.exec("session", id, ["true"], { timeout: 5 }), /unknown "timeout"/);
  await refused(driver.exec("session", id, ["true"], { timeoutMs: -1 }), /timeoutMs/);
  await refused(driver.exec("session", id, ["true"], { tag: "a b" }), /^tag/);
  await refused(driver.exec("session", id, ["true"], { workdir: "../x" }), /^workdir/);
  await refused(driver.exec("session", id, ["true"], { env: { X: 1 } }), /env\.X must be a string/);
  await refused(driver.attach("session", id, { commandId: "xyz" }), /command_id/);
  await refused(driver.attach("session", id, {}), /commandId or its tag/);
  assert.deepEqual(await driver.commands("session", id), []);
});

test("command events carry the command's id, tag and exit on the event stream", async (t) => {
  const { driver, id } = await session(t, "ses-cmd-events");
  const abort = new AbortController();
  t.after(() => abort.abort());
  const seen = [];
  const follower = (async () => {
    for await (const item of driver.events({ scope: "session", id, signal: abort.signal })) {
      if (item.type === "event" && item.kind.startsWith("command-")) seen.push(item);
      if (item.kind === "command-exited") break;
    }
  })();
  const result = await driver.runCommand("session", id, ["/bin/sh", "-c", "exit 5"], {
    tag: "evt",
  });
  await waitFor(
    () => seen.some((event) => event.kind === "command-exited"),
    20_000,
    "the command-exited event",
  );
  await follower;
  assert.equal(seen.length, 2, seen.map((event) => event.kind).join(","));
  const [started, exited] = seen;
  assert.equal(started.kind, "command-started");
  assert.equal(exited.kind, "command-exited");
  for (const event of seen) {
    assert.equal(event.commandId, result.commandId);
    assert.equal(event.tag, "evt");
    assert.equal("command" in event, false, "flattened");
  }
  assert.equal(exited.exit.code, 5);
  assert.equal(exited.exit.signal, null);
  assert.deepEqual(exited.exit.reason, { exited: { code: 5 } });
  assert.equal(exited.exit.outcome, "exited");
});

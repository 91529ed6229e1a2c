// Files in and out of a sandbox (protocol 11, tar streams protocol 12)
// through this package against the real daemon: a 3 MiB file in and out
// whole, from a Buffer and from a stream; stat, list and remove; bad
// paths refused naming them; the chunk limit as the protocol has it; and
// a tree in and out as a tar archive (the system's `tar` makes and reads
// them). Each test deprovisions the sandbox it made.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Readable } from "node:stream";

import {
  InvalidArgumentError,
  MAX_FILE_CHUNK,
  NotFoundError,
  SandboxdError,
} from "../index.js";
import { native } from "../lib/native.js";
import { fromNative } from "../lib/errors.js";
import {
  provisioner,
  secretToken,
  sessionEnv,
  uniqueId,
  workspaceOf,
} from "../testing/helpers.mjs";

/** A running session sandbox for test `t`, deprovisioned when it ends. */
async function session(t, prefix) {
  const { driver } = provisioner();
  const id = uniqueId(prefix);
  await driver.ensure("session", id, sessionEnv(id, secretToken()));
  t.after(() => driver.deprovisionSessionSandbox(id));
  return { driver, id };
}

/** Runs a shell script in the sandbox and insists it exited 0. */
async function run(driver, id, script) {
  const result = await driver.runCommand("session", id, ["/bin/sh", "-c", script]);
  assert.equal(result.exitCode, 0, `${script}: ${JSON.stringify(result)}`);
  return result.stdout;
}

/** A local scratch directory for test `t`, removed when it ends. */
function scratch(t) {
  const dir = mkdtempSync(path.join(tmpdir(), "sandboxd-node-files-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** `data` as a Readable of pieces of uneven sizes, none aligned to a chunk. */
function unevenStream(data) {
  const sizes = [1, 70_000, 333_333, 1_500_000, 12_345];
  const pieces = [];
  for (let at = 0, i = 0; at < data.length; i += 1) {
    const size = sizes[i % sizes.length];
    pieces.push(data.subarray(at, at + size));
    at += size;
  }
  return Readable.from(pieces);
}

async function rejection(promise) {
  return promise.then(
    (value) => assert.fail(`expected a rejection, got ${JSON.stringify(value)}`),
    (error) => error,
  );
}

test("a 3 MiB file goes in and out whole, owned by the sandbox, from a Buffer and from a stream", async (t) => {
  const { driver, id } = await session(t, "ses-files-big");
  const data = randomBytes(3 * 1024 * 1024);
  const report = await driver.putFile("session", id, "big.bin", data, { mode: 0o4750 });
  assert.deepEqual(report, { received: data.length, complete: true });

  const back = await driver.getFile("session", id, "big.bin");
  assert.ok(Buffer.isBuffer(back));
  assert.equal(back.length, data.length);
  assert.ok(back.equals(data), "the bytes read back are the bytes put");

  const stat = await driver.statFile("session", id, "big.bin");
  assert.equal(stat.name, "big.bin");
  assert.equal(stat.fileType, "file");
  assert.equal(stat.size, data.length);
  assert.equal(stat.mode, 0o750, "setuid dropped");
  assert.ok(Math.abs(stat.mtimeUnixMs - Date.now()) < 60_000, JSON.stringify(stat));

  // On the host: the same bytes, the sandbox's own file (not root's).
  const workspace = await workspaceOf(driver, "session", id);
  const onHost = statSync(path.join(workspace, "big.bin"));
  assert.notEqual(onHost.uid, 0);
  assert.equal(onHost.uid, statSync(workspace).uid);
  assert.ok(readFileSync(path.join(workspace, "big.bin")).equals(data));

  // From a stream of uneven pieces, into a directory the sandbox made.
  await run(driver, id, "mkdir -p in/deep");
  const streamed = await driver.putFile("session", id, "in/deep/streamed.bin", unevenStream(data));
  assert.equal(streamed.received, data.length);
  assert.ok((await driver.getFile("session", id, "in/deep/streamed.bin")).equals(data));
  assert.equal((await driver.statFile("session", id, "in/deep/streamed.bin")).mode, 0o644);

  // What the sandbox wrote, read back as it; an empty file; a string.
  await run(driver, id, "printf 'from inside\\n' > inside.txt");
  assert.equal((await driver.getFile("session", id, "inside.txt")).toString(), "from inside\n");
  await driver.putFile("session", id, "empty", Buffer.alloc(0));
  assert.equal((await driver.getFile("session", id, "empty")).length, 0);
  await driver.putFile("session", id, "note.txt", "héllo\n", { mode: 0o600 });
  assert.equal(await run(driver, id, "cat note.txt; stat -c %a note.txt"), "héllo\n600\n");
});

test("stat, list and remove: what the sandbox sees, a directory only recursively", async (t) => {
  const { driver, id } = await session(t, "ses-files-list");
  await run(driver, id, "mkdir -p d/e && echo hi > d/e/f && ln -s d/e/f link");
  await driver.putFile("session", id, "top.txt", "top\n");

  const listed = await driver.listFiles("session", id);
  assert.equal(listed.truncated, false);
  const kinds = Object.fromEntries(listed.entries.map((entry) => [entry.name, entry.fileType]));
  assert.equal(kinds["top.txt"], "file", JSON.stringify(listed));
  assert.equal(kinds.d, "dir");
  assert.equal(kinds.link, "symlink");
  const inner = await driver.listFiles("session", id, "d/e");
  assert.deepEqual(
    inner.entries.map((entry) => [entry.name, entry.fileType, entry.size]),
    [["f", "file", 3]],
  );
  assert.equal((await driver.statFile("session", id, "link")).fileType, "symlink");
  assert.equal((await driver.statFile("session", id, "")).name, ".");

  const notEmpty = await rejection(driver.removeFile("session", id, "d"));
  assert.ok(notEmpty instanceof SandboxdError, String(notEmpty));
  assert.match(notEmpty.daemonMessage, /not empty/);
  assert.equal((await driver.statFile("session", id, "d/e/f")).size, 3, "nothing removed");

  await driver.removeFile("session", id, "link");
  assert.equal((await driver.getFile("session", id, "d/e/f")).toString(), "hi\n", "not what it pointed at");
  await driver.removeFile("session", id, "d", { recursive: true });
  await driver.removeFile("session", id, "top.txt");
  const gone = await rejection(driver.statFile("session", id, "d"));
  assert.ok(gone instanceof NotFoundError, String(gone));
  const left = await driver.listFiles("session", id);
  for (const name of ["d", "top.txt", "link"]) {
    assert.ok(!left.entries.some((entry) => entry.name === name), `${name} is gone`);
  }
  const check = "test ! -e d && test ! -e top.txt && test ! -L link && echo gone";
  assert.equal(await run(driver, id, check), "gone\n");
});

test("a bad path is refused naming it, and bad arguments naming them, before anything is sent", async (t) => {
  const { driver, id } = await session(t, "ses-files-bad");
  const cases = [
    ["statFile", () => driver.statFile("session", id, "/etc/passwd"), "/etc/passwd", /absolute/],
    ["getFile", () => driver.getFile("session", id, "a/../../x"), "a/../../x", /'\.\.'/],
    ["putFile", () => driver.putFile("session", id, "../escape", "x"), "../escape", /'\.\.'/],
    ["listFiles", () => driver.listFiles("session", id, "nul\0byte"), "nul\\0byte", /NUL/],
    ["removeFile", () => driver.removeFile("session", id, "./"), "./", /workspace itself/],
    ["putTar", () => driver.putTar("session", id, "/tmp", Buffer.alloc(0)), "/tmp", /absolute/],
  ];
  for (const [call, attempt, shown, why] of cases) {
    const error = await rejection(attempt());
    assert.ok(error instanceof InvalidArgumentError, `${call}: ${error}`);
    assert.ok(error.daemonMessage.startsWith("path "), `${call}: ${error.daemonMessage}`);
    assert.ok(error.daemonMessage.includes(`"${shown}"`), `${call}: ${error.daemonMessage}`);
    assert.match(error.daemonMessage, why, call);
  }
  assert.equal(
    (await rejection(driver.getFile("session", id, "missing"))).constructor,
    NotFoundError,
  );
  const typeErrors = [
    [() => driver.getFile("session", id, 7), /^path must be a string/],
    [() => driver.putFile("session", id, "f", 42), /^data must be a string, a Buffer/],
    [() => driver.putFile("session", id, "f", "x", { mode: -1 }), /^mode must be a whole number/],
    [() => driver.putFile("session", id, "f", "x", { mdoe: 0o600 }), /unknown "mdoe"/],
    [() => driver.removeFile("session", id, "f", { recursive: "yes" }), /^recursive must be a boolean/],
    [() => driver.putTar("session", id, "", [Buffer.alloc(1)]), /^archive must be/],
  ];
  for (const [attempt, message] of typeErrors) {
    const error = await rejection(attempt());
    assert.ok(error instanceof InvalidArgumentError, String(error));
    assert.match(error.daemonMessage, message);
  }
  assert.deepEqual((await driver.listFiles("session", id)).entries.filter((e) => e.name === "f"), []);
});

test("MAX_FILE_CHUNK is the protocol's limit: one byte more in a chunk is refused naming it", async (t) => {
  const { id } = await session(t, "ses-files-limit");
  const client = native().NativeClient.connect(process.env.SANDBOXD_SOCKET);
  const piece = (size) => ({
    path: "limit.bin",
    offset: 0,
    data: Buffer.alloc(size),
    last: true,
    mode: 0o644,
  });
  const refused = await rejection(
    client.putFile("session", id, piece(MAX_FILE_CHUNK + 1)).catch((error) => {
      throw fromNative(error);
    }),
  );
  assert.ok(refused instanceof InvalidArgumentError, String(refused));
  const limit = `^data is ${MAX_FILE_CHUNK + 1} bytes, more than the limit of ${MAX_FILE_CHUNK}\\b`;
  assert.match(refused.daemonMessage, new RegExp(limit));
  const taken = await client.putFile("session", id, piece(MAX_FILE_CHUNK));
  assert.deepEqual(taken, { received: MAX_FILE_CHUNK, complete: true });
  const read = await client.getFile("session", id, "limit.bin", 0, MAX_FILE_CHUNK + 100_000);
  assert.equal(read.data.length, MAX_FILE_CHUNK, "a read is clamped to the limit too");
  assert.deepEqual([read.offset, read.size, read.eof], [0, MAX_FILE_CHUNK, true]);
});

/**
 * A local tree: a text file, a 2 MiB file (more than one chunk), an
 * executable with mode 750, an empty directory and a relative symlink.
 */
function localTree(dir) {
  mkdirSync(path.join(dir, "sub", "empty"), { recursive: true });
  writeFileSync(path.join(dir, "a.txt"), "alpha\n");
  writeFileSync(path.join(dir, "sub", "big.bin"), randomBytes(2 * 1024 * 1024));
  writeFileSync(path.join(dir, "sub", "run.sh"), "#!/bin/sh\necho ran\n");
  chmodSync(path.join(dir, "sub", "run.sh"), 0o750);
  symlinkSync("../a.txt", path.join(dir, "sub", "link"));
}

/** The names in a directory of the workspace, sorted. */
async function names(driver, id, dir) {
  return (await driver.listFiles("session", id, dir)).entries.map((entry) => entry.name).sort();
}

/** Everything an async iterator of Buffers yields, as one Buffer. */
async function collect(iterator) {
  const parts = [];
  for await (const data of iterator) {
    assert.ok(Buffer.isBuffer(data), "each piece is a Buffer");
    parts.push(data);
  }
  return Buffer.concat(parts);
}

test("a tree goes in and out as a tar archive; an entry that leads out is refused by its name", async (t) => {
  const { driver, id } = await session(t, "ses-files-tar");
  const local = scratch(t);
  const source = path.join(local, "source");
  localTree(source);
  const archive = execFileSync("tar", ["-c", "-C", source, "."], { maxBuffer: 64 << 20 });
  assert.ok(archive.length > MAX_FILE_CHUNK, "the archive takes more than one chunk");

  await run(driver, id, "mkdir tree");
  const report = await driver.putTar("session", id, "tree", archive);
  assert.deepEqual(report, { received: archive.length, complete: true });
  const big = readFileSync(path.join(source, "sub", "big.bin"));
  assert.ok((await driver.getFile("session", id, "tree/sub/big.bin")).equals(big));
  assert.equal((await driver.getFile("session", id, "tree/a.txt")).toString(), "alpha\n");
  assert.equal((await driver.statFile("session", id, "tree/sub/run.sh")).mode, 0o750);
  assert.equal((await driver.statFile("session", id, "tree/sub/link")).fileType, "symlink");
  assert.equal((await driver.statFile("session", id, "tree/sub/empty")).fileType, "dir");
  assert.equal(await run(driver, id, "tree/sub/run.sh; cat tree/sub/link"), "ran\nalpha\n");

  // The same archive streamed in uneven pieces, into the workspace itself.
  await driver.putTar("session", id, "", unevenStream(archive));
  assert.ok((await driver.getFile("session", id, "sub/big.bin")).equals(big));

  // Out again: the archive of `tree` holds `tree/…`, as the system's tar reads it.
  const out = await collect(driver.getTar("session", id, "tree"));
  const unpacked = path.join(local, "unpacked");
  mkdirSync(unpacked);
  execFileSync("tar", ["-x", "--no-same-owner", "-C", unpacked], { input: out });
  const back = path.join(unpacked, "tree");
  assert.ok(readFileSync(path.join(back, "sub", "big.bin")).equals(big));
  assert.equal(readFileSync(path.join(back, "a.txt"), "utf8"), "alpha\n");
  assert.equal(statSync(path.join(back, "sub", "run.sh")).mode & 0o777, 0o750);
  assert.equal(readFileSync(path.join(back, "sub", "link"), "utf8"), "alpha\n");
  assert.ok(statSync(path.join(back, "sub", "empty")).isDirectory());
  // The whole workspace (`""`): its contents, no entry for itself.
  const listed = execFileSync("tar", ["-t"], { input: await collect(driver.getTar("session", id)) })
    .toString()
    .split("\n");
  assert.ok(listed.includes("tree/sub/big.bin") && listed.includes("sub/big.bin"), listed.join(","));

  // An archive with an entry that climbs out is refused by the entry's
  // name, and nothing of it is kept.
  writeFileSync(path.join(local, "harmless.txt"), "x");
  const climbing = execFileSync("tar", [
    "-c", "-P", "-C", local, "--transform", "s,^,../,", "harmless.txt",
  ]);
  const refused = await rejection(driver.putTar("session", id, "tree", climbing));
  assert.ok(refused instanceof InvalidArgumentError, String(refused));
  assert.match(refused.daemonMessage, /'\.\.\/harmless\.txt'/);
  assert.match(refused.daemonMessage, /nothing of the archive was kept/);
  const workspace = await workspaceOf(driver, "session", id);
  for (const dir of [path.dirname(workspace), workspace, path.join(workspace, "tree")]) {
    assert.ok(!existsSync(path.join(dir, "harmless.txt")), `nothing in ${dir}`);
  }
  assert.deepEqual(await names(driver, id, "tree"), ["a.txt", "sub"]);
});

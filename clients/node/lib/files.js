// Files in and out of a sandbox's workspace on the driver (protocol 11;
// tar streams protocol 12). The daemon moves a file or a stream in chunks
// of at most MAX_FILE_CHUNK bytes; here `putFile` and `putTar` send a
// whole Buffer (or an async iterable of them, a Node stream say) chunk by
// chunk, `getFile` reads a whole file into one Buffer, and `getTar`
// follows a tar stream as an async iterator of Buffers.
//
// Only JavaScript's types are checked here, each error naming the
// argument: the rules of the values (a path inside the workspace, a mode
// of at most 7777 octal) are the protocol's, checked by the client
// library before anything is sent, so they have one wording. Every call
// goes through the driver's in-flight cap, one chunk at a time.
import { camel } from "./shape.js";
import { knownKeys } from "./exec-request.js";
import { InvalidArgumentError, SandboxdError } from "./errors.js";

/**
 * The most bytes one chunk carries (the protocol's MAX_FILE_CHUNK: a
 * request frame's 1 MiB less 16 KiB of room for the call's other fields).
 */
export const MAX_FILE_CHUNK = 1024 * 1024 - 16 * 1024;

/** The mode `putFile` gives a file when none is asked for. */
const DEFAULT_MODE = 0o644;

/** The driver's file calls over `client` (a NativeClient); `call` runs one native call under the cap. */
export function fileCalls(client, { call }) {
  async function putFile(scope, id, path, data, options = {}) {
    knownKeys("putFile options", options, ["mode"]);
    text("path", path);
    const mode = options.mode ?? DEFAULT_MODE;
    if (!Number.isInteger(mode) || mode < 0) {
      throw new InvalidArgumentError(`mode must be a whole number of 0 or more, not ${String(mode)}`);
    }
    const send = (piece) => call(() => client.putFile(scope, id, { path, mode, ...piece }));
    return sendChunks(pieces("data", data), send);
  }

  async function getFile(scope, id, path) {
    text("path", path);
    const parts = [];
    for await (const data of follow((offset) =>
      call(() => client.getFile(scope, id, path, offset, MAX_FILE_CHUNK)),
    )) {
      parts.push(data);
    }
    return Buffer.concat(parts);
  }

  async function statFile(scope, id, path) {
    text("path", path);
    return camel(await call(() => client.statFile(scope, id, path)));
  }

  async function listFiles(scope, id, path = "") {
    text("path", path);
    return camel(await call(() => client.listFiles(scope, id, path)));
  }

  async function removeFile(scope, id, path, options = {}) {
    knownKeys("removeFile options", options, ["recursive"]);
    text("path", path);
    const recursive = options.recursive ?? false;
    if (typeof recursive !== "boolean") {
      throw new InvalidArgumentError(`recursive must be a boolean, not ${typeof recursive}`);
    }
    await call(() => client.removeFile(scope, id, path, recursive));
  }

  async function putTar(scope, id, dir, archive) {
    text("dir", dir);
    const send = (piece) => call(() => client.putTar(scope, id, { path: dir, mode: 0, ...piece }));
    return sendChunks(pieces("archive", archive), send);
  }

  function getTar(scope, id, path = "") {
    text("path", path);
    return follow((offset) => call(() => client.getTar(scope, id, path, offset, MAX_FILE_CHUNK)));
  }

  return { putFile, getFile, statFile, listFiles, removeFile, putTar, getTar };
}

/** Refuses a path that is not a string (the native side would say so in its own words). */
function text(name, value) {
  if (typeof value !== "string") {
    throw new InvalidArgumentError(`${name} must be a string, not ${typeof value}`);
  }
}

/**
 * `data` as an async iterable of Uint8Arrays: a string (as UTF-8), a
 * Buffer or Uint8Array, or an async iterable of them (a Node Readable).
 */
function pieces(name, data) {
  if (typeof data === "string") return once(Buffer.from(data, "utf8"));
  if (data instanceof Uint8Array) return once(data);
  if (data != null && typeof data[Symbol.asyncIterator] === "function") return checked(name, data);
  throw new InvalidArgumentError(
    `${name} must be a string, a Buffer, a Uint8Array or an async iterable of them`,
  );
}

async function* once(data) {
  yield data;
}

async function* checked(name, iterable) {
  for await (const piece of iterable) {
    if (typeof piece === "string") {
      yield Buffer.from(piece, "utf8");
    } else if (piece instanceof Uint8Array) {
      yield piece;
    } else {
      throw new InvalidArgumentError(`${name} yielded a ${typeof piece}, not a Buffer or a string`);
    }
  }
}

/**
 * Sends what `source` yields in chunks of MAX_FILE_CHUNK bytes (the last
 * one shorter, or empty for no bytes at all), the last one marked.
 * Resolves to the daemon's last report, `{received, complete}`.
 */
async function sendChunks(source, send) {
  const pending = queue();
  let offset = 0;
  const flush = async (bytes, last) => {
    const report = await send({ offset, data: pending.take(bytes), last });
    if (report.received !== offset + bytes) {
      throw new SandboxdError(
        "internal",
        `the daemon says it received ${report.received} bytes, not the ${offset + bytes} sent`,
      );
    }
    offset = report.received;
    return report;
  };
  for await (const piece of source) {
    pending.push(piece);
    // Strictly more than one chunk: the last chunk is never empty
    // unless there were no bytes at all.
    while (pending.bytes > MAX_FILE_CHUNK) await flush(MAX_FILE_CHUNK, false);
  }
  return camel(await flush(pending.bytes, true));
}

/**
 * Bytes waiting to be sent. `take` copies its bytes into a Buffer of
 * their own: the native side reads it on another thread, so it must be
 * one no caller holds (and a large Buffer given whole is never copied
 * again and again).
 */
function queue() {
  const parts = [];
  let bytes = 0;
  return {
    get bytes() {
      return bytes;
    },
    push(piece) {
      if (piece.length > 0) parts.push(piece);
      bytes += piece.length;
    },
    take(count) {
      const out = Buffer.allocUnsafe(count);
      let filled = 0;
      while (filled < count) {
        const head = parts[0];
        const used = Math.min(head.length, count - filled);
        out.set(head.subarray(0, used), filled);
        filled += used;
        if (used === head.length) parts.shift();
        else parts[0] = head.subarray(used);
      }
      bytes -= count;
      return out;
    },
  };
}

/** Reads pieces from offset 0 to the end with `read(offset)`, yielding each one's bytes. */
async function* follow(read) {
  let offset = 0;
  for (;;) {
    const piece = await read(offset);
    offset = piece.offset + piece.data.length;
    if (piece.data.length > 0) yield piece.data;
    if (piece.eof) return;
  }
}

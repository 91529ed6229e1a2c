// One output stream of a command (stdout or stderr), followed by
// long-poll. The daemon keeps each stream in a bounded store and answers
// a read from any offset; this follower starts at offset 0 (the first
// byte still kept) and asks for `next` each time, so no byte comes twice
// and none is skipped unless the daemon dropped it first. Dropped bytes
// are not hidden: `dropped` counts them, and `chunks()` says where each
// gap was. It ends at the chunk that carries the command's proof, the
// last byte the stream will ever hold.
//
// The follower is a cursor: iterating again after a `break`, or after a
// read that failed (a daemon restart, a deadline), continues where the
// last iteration stopped. One iteration at a time.

/** How long one read waits at the daemon for bytes, and how many it takes at once. */
export const OUTPUT_WAIT_MS = 10_000;
export const OUTPUT_CHUNK_BYTES = 256 * 1024;

export class CommandOutput {
  #read;
  #offset = 0;
  #dropped = 0;
  #proof = null;
  #reading = false;

  /** `read(stream, offset, maxBytes, waitMs)` resolves to one chunk (`{data, start, next, dropped, proof}`). */
  constructor(stream, read) {
    /** `stdout` or `stderr`. */
    this.stream = stream;
    this.#read = read;
  }

  /** Bytes the daemon dropped before this follower read them (a gap in what it yielded). */
  get dropped() {
    return this.#dropped;
  }

  /** The stream offset the next read starts at. */
  get offset() {
    return this.#offset;
  }

  /** The command's proof, once this stream was read to its end; else null. */
  get proof() {
    return this.#proof;
  }

  /** Each piece as `{data, start, dropped}`: `dropped` bytes were lost just before `start`. */
  async *chunks() {
    if (this.#reading) {
      throw new Error(`the command's ${this.stream} is already being read (one iteration at a time)`);
    }
    this.#reading = true;
    try {
      while (this.#proof === null) {
        const chunk = await this.#read(this.stream, this.#offset, OUTPUT_CHUNK_BYTES, OUTPUT_WAIT_MS);
        // Advanced before the yield: a consumer that stops here has had it.
        this.#offset = chunk.next;
        this.#dropped += chunk.dropped;
        this.#proof = chunk.proof ?? null;
        if (chunk.data.length > 0 || chunk.dropped > 0) {
          yield { data: chunk.data, start: chunk.start, dropped: chunk.dropped };
        }
      }
    } finally {
      this.#reading = false;
    }
  }

  /** The bytes as Buffers, in order, until the command's end. */
  async *[Symbol.asyncIterator]() {
    for await (const chunk of this.chunks()) {
      if (chunk.data.length > 0) yield chunk.data;
    }
  }
}

/** Everything `output` still yields, as one Buffer. */
export async function readAll(output) {
  const parts = [];
  for await (const data of output) parts.push(data);
  return Buffer.concat(parts);
}

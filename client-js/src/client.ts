/**
 * The queue the agent's calls write to, and the sender that drains it.
 *
 * A call only builds a small object and puts it in a bounded ring (O(1), no I/O, no encoding);
 * encoding, compression and the network happen later, in a timer's turn of the event loop. No
 * method throws into the caller and no promise rejects: failures are counted in `stats()`.
 *
 * Up to two batches are in flight by default, each its own request: while the server stores one,
 * the next is on its way. A second is sent at once only when a full batch waits, so a trickle of
 * records still goes as one batch.
 */

/** When a record happened: a Date, an RFC 3339 string, or milliseconds since the epoch. */
export type Timestamp = Date | string | number;

/** The envelope of one record: its run, and optionally its time, id, session, agent, parent. */
export interface Envelope {
  runId: string;
  ts?: Timestamp;
  id?: string;
  sessionId?: string;
  agent?: string;
  parentRunId?: string;
}

export interface ClientOptions {
  /** Default `agent` of every record. */
  agent?: string;
  /** Default `session_id` of every record. */
  sessionId?: string;
  /**
   * What the agent runs as (its version, a prompt hash, a git sha): the `release` of every
   * record, so that Decisionboard can compare one release with another. 1-200 characters, no
   * control characters; the constructor throws a TypeError for any other value.
   */
  release?: string;
  /** Records that may wait; past it the oldest is dropped and counted (10,000). */
  maxQueue?: number;
  /** Records a batch (500); a full batch is sent at once. */
  batchSize?: number;
  /** Bytes a batch before compression (1,000,000). */
  maxBatchBytes?: number;
  /** A batch is sent at least this often, in ms (1,000). */
  flushIntervalMs?: number;
  /** Batches sent at once, each its own request (2). */
  maxInFlight?: number;
  /** One request's time limit, in ms (10,000). */
  timeoutMs?: number;
  /** Gzip bodies over 1 KB where the runtime has CompressionStream (true). */
  gzip?: boolean;
  /** The longest backoff between retries, in ms (30,000). */
  maxBackoffMs?: number;
  /** The longest `Retry-After` honoured, in ms (300,000). */
  maxRetryAfterMs?: number;
  /** Send what is queued when Node's event loop empties (`beforeExit`) (true). */
  flushAtExit?: boolean;
  /** How long that exit flush may take, in ms (5,000). */
  exitTimeoutMs?: number;
  /** Told of each failure (a rejected record, a lost batch, a call that could not be recorded). */
  onError?: (message: string) => void;
}

export interface ClientStats {
  /** Accepted by a call (before any drop). */
  queued: number;
  /** Stored by the server. */
  sent: number;
  /** The server had them already (a retry after a lost answer). */
  duplicates: number;
  /** Refused by the server as invalid; see lastError. */
  rejected: number;
  /** The queue was full: the oldest went. */
  dropped: number;
  /** A call that could not be recorded (data not JSON, say). */
  invalid: number;
  /** Unsent at shutdown, recorded after shutdown, or refused whole by the server. */
  lost: number;
  retries: number;
  batches: number;
  /** Records waiting now. */
  queue: number;
  lastError: string | undefined;
}

type Counter = Exclude<keyof ClientStats, "queue" | "lastError">;

interface Pending {
  id: string;
  kind: string;
  run_id: string;
  ts: Timestamp;
  session_id: string | undefined;
  agent: string | undefined;
  parent_run_id: string | undefined;
  release: string | undefined;
  data: unknown;
}

interface Answer {
  status: number | undefined;
  retryAfterMs: number | undefined;
  text: string;
  error: string;
}

interface ProcessLike {
  on(event: string, listener: () => void): unknown;
  off?(event: string, listener: () => void): unknown;
}

// Statuses after which the same batch may succeed later; any other status is final.
const RETRYABLE = new Set([408, 429, 500, 502, 503, 504]);
const COMPRESS_ABOVE = 1024; // bytes: smaller bodies are sent as they are

const live = new Set<RecordQueue>();
let exitHook: (() => void) | undefined;

function nodeProcess(): ProcessLike | undefined {
  const proc = (globalThis as { process?: ProcessLike }).process;
  return proc && typeof proc.on === "function" ? proc : undefined;
}

function randomHex(bytes: number): string {
  const webCrypto = (globalThis as { crypto?: { getRandomValues(a: Uint8Array): Uint8Array } }).crypto;
  const buf = new Uint8Array(bytes);
  if (webCrypto) webCrypto.getRandomValues(buf);
  else for (let i = 0; i < bytes; i++) buf[i] = Math.floor(Math.random() * 256);
  return Array.from(buf, (b) => b.toString(16).padStart(2, "0")).join("");
}

function unref<T>(timer: T): T {
  (timer as { unref?: () => void }).unref?.();
  return timer;
}

/** Retry-After as milliseconds: a number of seconds, or an HTTP date. */
export function retryAfterMs(value: string | null, capMs: number): number | undefined {
  if (!value) return undefined;
  let ms = Number(value.trim()) * 1000;
  if (!Number.isFinite(ms) || value.trim() === "") {
    const when = Date.parse(value);
    if (Number.isNaN(when)) return undefined;
    ms = when - Date.now();
  }
  return Math.min(Math.max(ms, 0), capMs);
}

/** What the server accepts as a release: 1-200 characters, none a control character. */
export function isValidRelease(value: unknown): value is string {
  if (typeof value !== "string" || value.length < 1 || value.length > 200) return false;
  return !/[\u0000-\u001f\u007f-\u009f]/.test(value); // C0, DEL and C1
}

export class RecordQueue {
  readonly agent: string | undefined;
  readonly sessionId: string | undefined;
  readonly release: string | undefined;
  private readonly endpoint: string;
  private readonly headers: Record<string, string>;
  private readonly maxQueue: number;
  private readonly batchSize: number;
  private readonly maxInFlight: number;
  private readonly maxBatchBytes: number;
  private readonly timeoutMs: number;
  private readonly gzip: boolean;
  private readonly maxBackoffMs: number;
  private readonly maxRetryAfterMs: number;
  private readonly exitTimeoutMs: number;
  private readonly onError: ((message: string) => void) | undefined;

  // A random prefix and a counter: ids unique to this client, so that a batch sent twice (a
  // retry after a lost answer) is stored once.
  private readonly idPrefix = `dbc-${randomHex(6)}-`;
  private seq = 0;
  // The ring: `size` records from `head`, oldest first.
  private readonly ring: (Pending | undefined)[];
  private head = 0;
  private size = 0;
  // Records taken by the senders and not yet settled; the senders at work, and their promises.
  private inflight = 0;
  private senders = 0;
  private readonly pumps = new Set<Promise<void>>();
  private wakeScheduled = false;
  private closed = false;
  private exiting = false;
  private deadline = Infinity;
  private readonly interval: ReturnType<typeof setInterval>;
  private readonly sleepers = new Set<{ timer: ReturnType<typeof setTimeout>; resolve: () => void }>();
  private readonly requests = new Set<AbortController>();
  private waiters: (() => void)[] = [];
  private readonly counters: Record<Counter, number> = {
    queued: 0,
    sent: 0,
    duplicates: 0,
    rejected: 0,
    dropped: 0,
    invalid: 0,
    lost: 0,
    retries: 0,
    batches: 0,
  };
  private lastError: string | undefined;

  constructor(url: string, key: string, options: ClientOptions = {}) {
    const parsed = new URL(url.replace(/\/+$/, ""));
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
      throw new TypeError(`url must be http(s)://host[:port][/prefix], got ${url}`);
    }
    this.endpoint = `${parsed.origin}${parsed.pathname.replace(/\/+$/, "")}/api/v1/records`;
    this.headers = { Authorization: `Bearer ${key}`, "Content-Type": "application/json" };
    if (options.release !== undefined && !isValidRelease(options.release)) {
      // Every record would be refused: say so now rather than lose them all later.
      throw new TypeError(
        `release must be a string of 1-200 characters without control characters, got ${JSON.stringify(options.release)}`,
      );
    }
    this.agent = options.agent;
    this.sessionId = options.sessionId;
    this.release = options.release;
    this.maxQueue = Math.max(1, Math.floor(options.maxQueue ?? 10_000));
    this.batchSize = Math.max(1, Math.floor(options.batchSize ?? 500));
    this.maxInFlight = Math.max(1, Math.floor(options.maxInFlight ?? 2));
    this.maxBatchBytes = Math.max(1024, options.maxBatchBytes ?? 1_000_000);
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.gzip = (options.gzip ?? true) && typeof CompressionStream === "function";
    this.maxBackoffMs = options.maxBackoffMs ?? 30_000;
    this.maxRetryAfterMs = options.maxRetryAfterMs ?? 300_000;
    this.exitTimeoutMs = options.exitTimeoutMs ?? 5_000;
    this.onError = options.onError;
    this.ring = new Array(this.maxQueue);
    this.interval = unref(setInterval(() => this.wake(), options.flushIntervalMs ?? 1_000));
    if (options.flushAtExit ?? true) watchExit(this);
  }

  // --- the agent's side: O(1), never I/O, never throws ----------------------------------------

  /** Queue one record of `kind`; returns its id (undefined if it could not be queued). */
  record(kind: string, data: unknown, envelope: Envelope): string | undefined {
    try {
      if (this.closed) {
        this.counters.lost++;
        return undefined;
      }
      if (typeof data !== "object" || data === null) {
        return this.refuse(`record(${String(kind)}): data must be an object, got ${String(data)}`);
      }
      const id = envelope.id ?? this.idPrefix + this.seq++;
      const pending: Pending = {
        id,
        kind,
        run_id: envelope.runId,
        ts: envelope.ts ?? Date.now(),
        session_id: envelope.sessionId ?? this.sessionId,
        agent: envelope.agent ?? this.agent,
        parent_run_id: envelope.parentRunId,
        release: this.release,
        data,
      };
      let tail = this.head + this.size;
      if (tail >= this.maxQueue) tail -= this.maxQueue;
      this.ring[tail] = pending;
      if (this.size === this.maxQueue) {
        // Full: the slot just written was the oldest record's.
        this.head = this.head + 1 === this.maxQueue ? 0 : this.head + 1;
        this.counters.dropped++;
      } else {
        this.size++;
      }
      this.counters.queued++;
      if (this.size >= this.batchSize && this.senders < this.maxInFlight && !this.wakeScheduled) {
        this.wakeScheduled = true;
        setTimeout(() => {
          this.wakeScheduled = false;
          this.wake();
        }, 0);
      }
      return id;
    } catch (error) {
      this.fail("invalid", `record(${String(kind)}) failed: ${String(error)}`);
      return undefined;
    }
  }

  /** Resolves true once everything queued so far is sent or given up on; false after `timeoutMs`. */
  flush(timeoutMs = 10_000): Promise<boolean> {
    try {
      if (this.drained()) return Promise.resolve(true);
      return new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => done(false), timeoutMs);
        const done = (value: boolean) => {
          clearTimeout(timer);
          this.waiters = this.waiters.filter((w) => w !== waiter);
          resolve(value);
        };
        const waiter = () => done(true);
        this.waiters.push(waiter);
        this.wake();
      });
    } catch (error) {
      this.fail("invalid", `flush failed: ${String(error)}`);
      return Promise.resolve(false);
    }
  }

  /**
   * Send what is queued for up to `timeoutMs`, then stop: what is still unsent is counted lost.
   * Records after shutdown() are counted lost too. Resolves true when all was sent in time.
   */
  async shutdown(timeoutMs = 5_000): Promise<boolean> {
    try {
      if (this.closed) return this.drained();
      this.closed = true;
      clearInterval(this.interval);
      live.delete(this);
      this.deadline = Math.min(this.deadline, Date.now() + timeoutMs);
      const lostBefore = this.counters.lost;
      const flushed = await this.flush(timeoutMs);
      this.giveUp("shut down before it was sent");
      // The requests under way were just aborted: let their batches be counted before answering.
      await Promise.race([
        Promise.all(this.pumps),
        new Promise((resolve) => unref(setTimeout(resolve, 1_000))),
      ]);
      return flushed && this.counters.lost === lostBefore;
    } catch (error) {
      this.fail("invalid", `shutdown failed: ${String(error)}`);
      return false;
    }
  }

  /** Count a call that cannot be recorded (as `invalid`); returns undefined, its id. */
  protected refuse(message: string): undefined {
    this.fail("invalid", message);
    return undefined;
  }

  stats(): ClientStats {
    return { ...this.counters, queue: this.size, lastError: this.lastError };
  }

  // --- at exit --------------------------------------------------------------------------------

  /** Node's event loop has emptied (`beforeExit`): send what is left, within exitTimeoutMs. */
  exitFlush(): void {
    if (this.drained() || Date.now() > this.deadline) {
      if (!this.drained()) this.giveUp("the exit flush ran out of time");
      return;
    }
    if (!this.exiting) {
      this.exiting = true;
      this.deadline = Math.min(this.deadline, Date.now() + this.exitTimeoutMs);
    }
    // A timer that holds the process until the deadline, when what is left is given up.
    const guard = setTimeout(() => this.giveUp("the exit flush ran out of time"), this.deadline - Date.now());
    void this.flush(Math.max(0, this.deadline - Date.now())).then(() => clearTimeout(guard));
    this.cutSleep();
  }

  // --- the sender -----------------------------------------------------------------------------

  private drained(): boolean {
    return this.size === 0 && this.inflight === 0 && this.senders === 0;
  }

  /** Whether a sender may take a batch now: the first takes whatever waits, another only a full one. */
  private batchWaiting(senders: number): boolean {
    return this.size > 0 && (senders === 0 || this.size >= this.batchSize);
  }

  private wake(): void {
    if (this.size === 0 && this.senders === 0) {
      this.settleWaiters();
      return;
    }
    while (this.senders < this.maxInFlight && this.batchWaiting(this.senders)) {
      this.senders++; // before the sender's first check, which runs within this call
      const pump = this.pump();
      this.pumps.add(pump);
      void pump.then(() => this.pumps.delete(pump));
    }
  }

  private async pump(): Promise<void> {
    try {
      // With another sender at work, a partial batch is left to the last one.
      while (this.batchWaiting(this.senders - 1)) await this.sendOneBatch();
    } catch (error) {
      this.fail("invalid", `sender error: ${String(error)}`); // a bug here must not stop sending
    } finally {
      this.senders--;
      this.settleWaiters();
    }
  }

  private settleWaiters(): void {
    if (!this.drained()) return;
    const waiters = this.waiters;
    this.waiters = [];
    for (const waiter of waiters) waiter();
  }

  /** Take up to batchSize records (and maxBatchBytes), encode and send them. */
  private async sendOneBatch(): Promise<void> {
    const parts: string[] = [];
    let bytes = 2;
    let taken = 0;
    while (taken < this.size && parts.length < this.batchSize) {
      let index = this.head + taken;
      if (index >= this.maxQueue) index -= this.maxQueue;
      const encoded = this.encode(this.ring[index] as Pending);
      if (encoded !== undefined) {
        // Over the byte budget: the rest waits for the next batch.
        if (parts.length > 0 && bytes + encoded.length + 1 > this.maxBatchBytes) break;
        parts.push(encoded);
        bytes += encoded.length + 1;
      }
      this.ring[index] = undefined;
      taken++;
    }
    this.head = (this.head + taken) % this.maxQueue;
    this.size -= taken;
    this.inflight += parts.length;
    try {
      if (parts.length > 0) await this.send(parts);
    } finally {
      this.inflight -= parts.length;
    }
  }

  private encode(pending: Pending): string | undefined {
    try {
      const ts = pending.ts;
      if (typeof ts === "number") pending.ts = new Date(ts).toISOString();
      else if (ts instanceof Date) pending.ts = ts.toISOString();
      return JSON.stringify(pending);
    } catch (error) {
      this.fail("invalid", `record ${pending.id} is not JSON: ${String(error)}`);
      return undefined;
    }
  }

  private async send(parts: string[]): Promise<void> {
    const text = `{"records":[${parts.join(",")}]}`;
    let body: string | ArrayBuffer = text;
    let compressed = false;
    if (this.gzip && text.length > COMPRESS_ABOVE) {
      body = await gzipped(text);
      compressed = true;
    }
    for (let attempt = 0; ; attempt++) {
      const answer = await this.post(body, compressed);
      const status = answer.status;
      if (status === 200 || status === 207) {
        this.settle(parts.length, answer.text);
        return;
      }
      if (status === 413 && parts.length > 1) {
        // Too big for this server: halve and resend.
        const half = Math.floor(parts.length / 2);
        await this.send(parts.slice(0, half));
        await this.send(parts.slice(half));
        return;
      }
      if (status !== undefined && !RETRYABLE.has(status)) {
        this.fail("lost", `HTTP ${status}: ${answer.text.slice(0, 300)}`, parts.length);
        return;
      }
      this.lastError = answer.error || `HTTP ${status}`;
      // "Retry-After: 0" (a window about to reset) still backs off a little.
      const delay = answer.retryAfterMs || this.backoff(attempt);
      if (Date.now() + delay > this.deadline) {
        this.fail("lost", `gave up at shutdown: ${this.lastError}`, parts.length);
        return;
      }
      this.counters.retries++;
      await this.sleep(delay);
    }
  }

  private settle(count: number, text: string): void {
    let accepted = count;
    let duplicates = 0;
    let rejected: unknown[] = [];
    try {
      const answer = JSON.parse(text) as { accepted: number; duplicates: number; rejected?: unknown[] };
      if (Number.isInteger(answer.accepted) && Number.isInteger(answer.duplicates)) {
        accepted = answer.accepted;
        duplicates = answer.duplicates;
        rejected = Array.isArray(answer.rejected) ? answer.rejected : [];
      }
    } catch {
      // Not the documented answer: the 2xx says the batch is stored.
    }
    this.counters.sent += accepted;
    this.counters.duplicates += duplicates;
    this.counters.batches++;
    if (rejected.length > 0) {
      this.fail("rejected", `rejected: ${JSON.stringify(rejected[0]).slice(0, 500)}`, rejected.length);
    }
  }

  private backoff(attempt: number): number {
    const base = Math.min(this.maxBackoffMs, 250 * 2 ** attempt);
    return base / 2 + (Math.random() * base) / 2; // jitter, so clients do not march in step
  }

  /** One POST; status undefined when the server could not be reached or did not answer in time. */
  private async post(body: string | ArrayBuffer, compressed: boolean): Promise<Answer> {
    const controller = new AbortController();
    this.requests.add(controller);
    const limit = Math.max(0, Math.min(this.timeoutMs, this.deadline - Date.now()));
    const timer = unref(setTimeout(() => controller.abort(), limit));
    try {
      const headers = compressed ? { ...this.headers, "Content-Encoding": "gzip" } : this.headers;
      const response = await fetch(this.endpoint, {
        method: "POST",
        headers,
        body,
        signal: controller.signal,
      });
      const text = await response.text();
      return {
        status: response.status,
        retryAfterMs: retryAfterMs(response.headers.get("retry-after"), this.maxRetryAfterMs),
        text,
        error: "",
      };
    } catch (error) {
      const cause = (error as { cause?: unknown }).cause;
      const detail = cause ? `${String(error)} (${String(cause)})` : String(error);
      return { status: undefined, retryAfterMs: undefined, text: "", error: detail };
    } finally {
      clearTimeout(timer);
      this.requests.delete(controller);
    }
  }

  /** Wait before a retry; cut short by shutdown or the exit flush. */
  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const sleeper = {
        timer: setTimeout(() => {
          this.sleepers.delete(sleeper);
          resolve();
        }, ms),
        resolve,
      };
      // Waiting to retry does not keep the process alive, except while it is exiting.
      if (!this.exiting) unref(sleeper.timer);
      this.sleepers.add(sleeper);
    });
  }

  private cutSleep(): void {
    for (const sleeper of this.sleepers) {
      clearTimeout(sleeper.timer);
      sleeper.resolve();
    }
    this.sleepers.clear();
  }

  /** Stop now: abort the request under way, count what is unsent as lost. */
  private giveUp(why: string): void {
    this.deadline = Math.min(this.deadline, Date.now());
    this.cutSleep();
    for (const request of this.requests) request.abort();
    if (this.size > 0) {
      const unsent = this.size;
      this.ring.fill(undefined);
      this.head = 0;
      this.size = 0;
      this.fail("lost", why, unsent);
    }
  }

  private fail(counter: Counter, message: string, n = 1): void {
    this.counters[counter] += n;
    this.lastError = message;
    if (this.onError) {
      try {
        this.onError(message);
      } catch {
        // The agent's own handler must not stop the sender either.
      }
    }
  }
}

async function gzipped(text: string): Promise<ArrayBuffer> {
  const stream = new Blob([text]).stream().pipeThrough(new CompressionStream("gzip"));
  return new Response(stream).arrayBuffer();
}

function watchExit(queue: RecordQueue): void {
  live.add(queue);
  const proc = nodeProcess();
  if (!proc || exitHook) return;
  exitHook = () => {
    for (const each of live) each.exitFlush();
  };
  proc.on("beforeExit", exitHook);
}

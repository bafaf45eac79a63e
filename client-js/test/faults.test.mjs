// A server that is down, slow, or answers 500 or 429 never hurts the caller: no throw, no
// wait, bounded memory, and what could not be kept is counted. The misbehaving servers are
// loopback HTTP servers made here; the live product is exercised by test/live/.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { test } from "node:test";

import { Decisionboard, retryAfterMs } from "decisionboard-client";

const NOTICE = { code: "classifier.fallback", message: "m", detail: { from: "a", to: "b" } };

/** A loopback server whose handler answers; each request's arrival time and body are kept. */
async function serve(t, handler) {
  const requests = [];
  const server = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      requests.push({ at: Date.now(), headers: req.headers, body: Buffer.concat(chunks) });
      handler(req, res, requests.length);
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${server.address().port}`;
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  return {
    url,
    requests,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(resolve);
      }),
  };
}

/** Resolves once `condition()` holds, polling; fails the test past `ms`. A loaded machine may
 * take far longer than usual to run the client's timers and the loopback server. */
async function until(condition, ms, what) {
  const deadline = Date.now() + ms;
  while (!condition()) {
    assert.ok(Date.now() < deadline, `not within ${ms} ms: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

function stored(body) {
  return JSON.parse(body.toString()).records.length;
}

/** Microseconds the slowest and the average of `n` calls took. */
function timeCalls(n, call) {
  let worst = 0;
  const started = performance.now();
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    call(i);
    worst = Math.max(worst, performance.now() - t);
  }
  return { calls: n, worstMs: worst, meanUs: ((performance.now() - started) * 1000) / n };
}

/** No call waited on the network: a connection attempt or a request would take milliseconds
 * each, every time; a busy machine may still preempt one call now and then. The mean is held
 * to its bound over many calls only: the one call a test times alone may be the one preempted,
 * and the worst-case bound still catches a call that waits. */
function assertNeverWaits(timing) {
  if (timing.calls >= 50) {
    assert.ok(timing.meanUs < 200, `a call took ${timing.meanUs} µs on average`);
  }
  assert.ok(timing.worstMs < 250, `a call took ${timing.worstMs} ms`);
}

test("it never throws or waits when nothing listens, and drops the oldest past maxQueue", async (t) => {
  const gone = await serve(t, () => {});
  await gone.close(); // the port is now closed: every connection is refused
  const db = new Decisionboard(gone.url, "k", { maxQueue: 100, batchSize: 10, flushIntervalMs: 10 });
  const ids = [];
  const timing = timeCalls(1000, () => ids.push(db.notice(NOTICE, { runId: "r" })));
  assertNeverWaits(timing);
  assert.equal(new Set(ids).size, 1000);
  await until(() => db.stats().retries > 0, 10_000, "a failed send retried");
  const stats = db.stats();
  assert.equal(stats.queued, 1000);
  assert.ok(stats.queue <= 100, `queue ${stats.queue}`);
  // At most one batch is out of the ring, waiting to be retried.
  assert.ok(stats.dropped >= 890 && stats.dropped <= 900, `dropped ${stats.dropped}`);
  assert.ok(stats.retries > 0);
  assert.match(stats.lastError, /fetch failed|ECONNREFUSED/);
  assert.equal(await db.flush(200), false);
  assert.equal(await db.shutdown(200), false);
  const after = db.stats();
  assert.equal(after.queue, 0);
  assert.equal(after.sent, 0);
  assert.equal(after.dropped + after.lost, 1000);
  assert.equal(db.notice(NOTICE, { runId: "r" }), undefined); // after shutdown: counted lost
  assert.equal(db.stats().lost, after.lost + 1);
});

test("a server that never answers costs the caller nothing and shutdown ends on time", async (t) => {
  const slow = await serve(t, () => {}); // reads the request, never answers
  const db = new Decisionboard(slow.url, "k", { batchSize: 5, flushIntervalMs: 10, timeoutMs: 60_000 });
  const timing = timeCalls(50, () => db.notice(NOTICE, { runId: "r" }));
  assertNeverWaits(timing);
  await until(() => slow.requests.length > 0, 10_000, "the first batch posted");
  await new Promise((resolve) => setTimeout(resolve, 100));
  assert.equal(slow.requests.length, 2); // two batches in flight (maxInFlight), never more
  const started = Date.now();
  assert.equal(await db.shutdown(500), false);
  const took = Date.now() - started;
  assert.ok(took >= 450 && took < 3_000, `shutdown took ${took} ms`);
  await until(() => db.stats().lost === 50, 10_000, "the 50 records counted lost");
  const stats = db.stats();
  assert.equal(stats.sent, 0);
  await slow.close();
});

test("two batches are in flight at once, one with maxInFlight 1, and a trickle goes as one batch", async (t) => {
  for (const [maxInFlight, most] of [
    [2, 2],
    [1, 1],
  ]) {
    let open = 0;
    let highest = 0;
    const server = await serve(t, (req, res, n) => {
      open++;
      highest = Math.max(highest, open);
      setTimeout(() => {
        open--;
        const count = stored(server.requests[n - 1].body);
        res.writeHead(200, { "Content-Type": "application/json" });
        res.end(JSON.stringify({ accepted: count, duplicates: 0, rejected: [] }));
      }, 300);
    });
    const db = new Decisionboard(server.url, "k", { batchSize: 10, maxInFlight, gzip: false, flushIntervalMs: 5_000 });
    for (let i = 0; i < 60; i++) db.notice(NOTICE, { runId: "r" });
    assert.equal(await db.flush(30_000), true);
    for (let i = 0; i < 7; i++) db.notice(NOTICE, { runId: "r" });
    assert.equal(await db.flush(30_000), true);
    assert.equal(await db.shutdown(1_000), true);
    const sizes = server.requests.map((r) => stored(r.body)).sort((a, b) => a - b);
    assert.deepEqual(sizes, [7, 10, 10, 10, 10, 10, 10]);
    assert.equal(highest, most);
    assert.equal(db.stats().sent, 67);
    await server.close();
  }
});

test("a 500 is retried with backoff until the batch is stored", async (t) => {
  const flaky = await serve(t, (req, res, n) => {
    if (n <= 2) {
      res.writeHead(500).end("boom");
      return;
    }
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(JSON.stringify({ accepted: stored(flaky.requests.at(-1).body), duplicates: 0, rejected: [] }));
  });
  const db = new Decisionboard(flaky.url, "k", { flushIntervalMs: 10, gzip: false });
  for (let i = 0; i < 20; i++) db.notice(NOTICE, { runId: "r" });
  assert.equal(await db.flush(10_000), true);
  const stats = db.stats();
  assert.deepEqual([stats.sent, stats.retries, stats.lost], [20, 2, 0]);
  assert.equal(flaky.requests.length, 3);
  // The same batch, the same ids, each time: a retry stores nothing twice.
  assert.equal(flaky.requests[0].body.toString(), flaky.requests[2].body.toString());
  const gap = flaky.requests[1].at - flaky.requests[0].at;
  assert.ok(gap >= 100, `retried after ${gap} ms`);
  await db.shutdown();
  await flaky.close();
});

test("Retry-After on a 429 is waited exactly, not the shorter backoff", async (t) => {
  const limited = await serve(t, (req, res, n) => {
    if (n === 1) {
      res.writeHead(429, { "Retry-After": "2" }).end();
      return;
    }
    res.writeHead(200).end(JSON.stringify({ accepted: 3, duplicates: 0, rejected: [] }));
  });
  const db = new Decisionboard(limited.url, "k", { flushIntervalMs: 10 });
  for (let i = 0; i < 3; i++) db.notice(NOTICE, { runId: "r" });
  const caller = timeCalls(1, () => db.notice(NOTICE, { runId: "r" }));
  assertNeverWaits(caller);
  assert.equal(await db.flush(10_000), true);
  const gap = limited.requests[1].at - limited.requests[0].at;
  assert.ok(gap >= 1_950 && gap < 5_000, `retried after ${gap} ms`);
  assert.equal(db.stats().retries, 1);
  await db.shutdown();
  await limited.close();
});

test("a Retry-After longer than shutdown's time is given up at once and counted lost", async (t) => {
  const limited = await serve(t, (req, res) => res.writeHead(503, { "Retry-After": "120" }).end());
  const db = new Decisionboard(limited.url, "k", { flushIntervalMs: 10 });
  db.notice(NOTICE, { runId: "r" });
  await until(() => limited.requests.length > 0, 10_000, "the batch posted");
  const started = Date.now();
  assert.equal(await db.shutdown(1_000), false);
  assert.ok(Date.now() - started < 3_000);
  await until(() => db.stats().lost === 1, 10_000, "the record counted lost");
  await limited.close();
});

test("a refused batch is dropped and counted, and a 413 halves the batch", async (t) => {
  const picky = await serve(t, (req, res, n) => {
    const count = stored(picky.requests.at(-1).body);
    if (req.headers.authorization === "Bearer bad") return res.writeHead(401).end("no");
    if (count > 5) return res.writeHead(413).end();
    res.writeHead(200).end(JSON.stringify({ accepted: count, duplicates: 0, rejected: [] }));
  });
  const refused = new Decisionboard(picky.url, "bad", { flushIntervalMs: 10, gzip: false });
  for (let i = 0; i < 3; i++) refused.notice(NOTICE, { runId: "r" });
  assert.equal(await refused.flush(5_000), true);
  assert.deepEqual([refused.stats().lost, refused.stats().retries], [3, 0]);
  assert.match(refused.stats().lastError, /HTTP 401/);
  const halved = new Decisionboard(picky.url, "k", { flushIntervalMs: 10, gzip: false });
  for (let i = 0; i < 20; i++) halved.notice(NOTICE, { runId: "r" });
  assert.equal(await halved.flush(5_000), true);
  assert.equal(halved.stats().sent, 20);
  await refused.shutdown();
  await halved.shutdown();
  await picky.close();
});

test("a batch is sent when full, before the timer, and big bodies are gzipped", async (t) => {
  const ok = await serve(t, (req, res) => {
    res.writeHead(200).end(JSON.stringify({ accepted: 50, duplicates: 0, rejected: [] }));
  });
  const db = new Decisionboard(ok.url, "k", { batchSize: 50, flushIntervalMs: 60_000 });
  for (let i = 0; i < 50; i++) db.notice(NOTICE, { runId: "r" });
  await until(() => db.stats().sent === 50, 10_000, "the full batch sent");
  assert.equal(ok.requests.length, 1);
  assert.equal(ok.requests[0].headers["content-encoding"], "gzip");
  assert.equal(db.stats().sent, 50);
  await db.shutdown();
  await ok.close();
});

test("a call that cannot be recorded is counted, never thrown", async (t) => {
  const ok = await serve(t, (req, res) => {
    res.writeHead(200).end(JSON.stringify({ accepted: 1, duplicates: 0, rejected: [] }));
  });
  const errors = [];
  const db = new Decisionboard(ok.url, "k", {
    flushIntervalMs: 10,
    onError: (message) => {
      errors.push(message);
      throw new Error("the agent's handler fails too");
    },
  });
  const cyclic = { code: "a.b", message: "m", detail: {} };
  cyclic.detail.self = cyclic;
  assert.ok(db.notice(cyclic, { runId: "r" }));
  assert.ok(db.record("notice", { code: "a.b", message: "m", detail: { n: 10n } }, { runId: "r" }));
  assert.ok(db.notice(NOTICE, { runId: "r", ts: new Date("invalid") }));
  assert.equal(db.toolChoice({ kind: "bogus" }, { runId: "r" }), undefined);
  assert.equal(db.notice(null, { runId: "r" }), undefined);
  assert.equal(db.modelCall(undefined, { runId: "r" }), undefined);
  db.notice(NOTICE, { runId: "r" });
  assert.equal(await db.flush(5_000), true);
  const stats = db.stats();
  assert.deepEqual([stats.invalid, stats.sent], [6, 1]);
  assert.equal(errors.length, 6);
  await db.shutdown();
  await ok.close();
});

test("the release given at construction is on every record, and a bad one throws at once", async (t) => {
  const ok = await serve(t, (req, res) => {
    res.writeHead(200).end(JSON.stringify({ accepted: stored(ok.requests.at(-1).body), duplicates: 0, rejected: [] }));
  });
  const db = new Decisionboard(ok.url, "k", { release: "2026.12.1", flushIntervalMs: 10, gzip: false });
  assert.equal(db.release, "2026.12.1");
  db.notice(NOTICE, { runId: "r" });
  db.modelCall({ iteration: 0, provider: "p", model: "m", usage: { input: 1, output: 1 }, stopReason: "stop", durationMs: 1 }, { runId: "r" });
  assert.equal(await db.flush(5_000), true);
  const records = ok.requests.flatMap((r) => JSON.parse(r.body.toString()).records);
  assert.deepEqual(records.map((r) => r.release), ["2026.12.1", "2026.12.1"]);
  await db.shutdown();
  const plain = new Decisionboard(ok.url, "k", { flushIntervalMs: 10, gzip: false });
  plain.notice(NOTICE, { runId: "r" });
  assert.equal(await plain.flush(5_000), true);
  assert.equal("release" in JSON.parse(ok.requests.at(-1).body.toString()).records[0], false);
  await plain.shutdown();
  for (const bad of ["", "x".repeat(201), "v1\nv2", "tab\there", "\u0085", 7]) {
    assert.throws(() => new Decisionboard(ok.url, "k", { release: bad, flushAtExit: false }), TypeError);
  }
  new Decisionboard(ok.url, "k", { release: "x".repeat(200), flushAtExit: false }).shutdown();
  await ok.close();
});

test("Retry-After is read as seconds or as an HTTP date, and capped", () => {
  assert.equal(retryAfterMs("3", 60_000), 3_000);
  assert.equal(retryAfterMs("0", 60_000), 0);
  assert.equal(retryAfterMs("9999", 60_000), 60_000);
  const date = new Date(Date.now() + 10_000).toUTCString();
  const ms = retryAfterMs(date, 60_000);
  assert.ok(ms > 8_000 && ms <= 10_000, String(ms));
  assert.equal(retryAfterMs("soon", 60_000), undefined);
  assert.equal(retryAfterMs(null, 60_000), undefined);
});

test("memory stays bounded however long the server is down", async (t) => {
  const { setFlagsFromString } = await import("node:v8");
  const { runInNewContext } = await import("node:vm");
  setFlagsFromString("--expose-gc");
  const gc = runInNewContext("gc");
  const gone = await serve(t, () => {});
  await gone.close();
  const db = new Decisionboard(gone.url, "k", { maxQueue: 1_000, flushIntervalMs: 10 });
  const record = (i) => db.notice({ ...NOTICE, detail: { i, pad: "x".repeat(200) } }, { runId: "r" });
  for (let i = 0; i < 5_000; i++) record(i);
  gc();
  const before = process.memoryUsage().heapUsed;
  for (let i = 0; i < 200_000; i++) record(i);
  gc();
  const grown = process.memoryUsage().heapUsed - before;
  // 200,000 records of ~300 bytes would be ~60 MB; the ring holds 1,000 of them.
  assert.ok(grown < 5_000_000, `the heap grew by ${grown} bytes`);
  assert.ok(db.stats().dropped >= 200_000);
  await db.shutdown(100);
});

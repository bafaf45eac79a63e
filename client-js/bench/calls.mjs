// The agent's cost of recording with the client, and its ceilings, against a live server
// (run by bench/client_js.py, which starts the server and records the figures).
//
// floor:  the same envelope object built and pushed on a plain array: what any in-memory queue
//         costs at the least. The client's call is measured against it.
// client: the examples' records, through each kind's own method, in the frameworks' shapes,
//         1,000 calls at a time with the event loop turning in between (as an agent's awaits
//         do), then flush(). `call` is the time inside the calls; `thread` the main thread's
//         busy time over the whole run (performance.eventLoopUtilization), encoding, gzip and
//         fetch included, per record.
// plain:  the same records encoded, gzipped and posted by a hand-written loop (batches of 500,
//         one request at a time): the thread's busy time per record of the least a sender does.
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { setImmediate as turn } from "node:timers/promises";

import { Decisionboard } from "decisionboard-client";

const URL_ = process.env.DECISIONBOARD_URL;
const KEY = process.env.DECISIONBOARD_KEY;
const N = Number(process.env.BENCH_RECORDS ?? 100_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CHUNK = 1_000;
const examples = readFileSync(process.env.DECISIONBOARD_EXAMPLES, "utf8")
  .split("\n")
  .filter(Boolean)
  .map(JSON.parse);

const METHODS = {
  "tool_choice.pick": (db, data, env) => db.toolChoice(data, env),
  "tool_choice.pick_error": (db, data, env) => db.toolChoice(data, env),
  "tool_choice.outcome": (db, data, env) => db.toolChoice(data, env),
  model_selection: (db, data, env) => db.modelSelection(data, env),
  turn: (db, data, env) => db.turn(data, env),
  "classifier.verdict": (db, data, env) => db.classifierVerdict(data, env),
  notice: (db, data, env) => db.notice(data, env),
  "provider.error": (db, data, env) => db.providerError(data, env),
  reliability: (db, data, env) => db.reliability(data, env),
  model_call: (db, data, env) => db.modelCall(data, env),
};
const calls = examples.map((e) => ({
  method: METHODS[e.kind],
  kind: e.kind,
  data: e.data,
  env: { runId: e.run_id, agent: e.agent, sessionId: e.session_id },
}));

async function floor() {
  const queue = [];
  let inside = 0;
  for (let done = 0; done < N; done += CHUNK) {
    const t = performance.now();
    for (let i = done; i < done + CHUNK; i++) {
      const c = calls[i % calls.length];
      queue.push({
        id: `floor-${i}`,
        kind: c.kind,
        run_id: c.env.runId,
        ts: Date.now(),
        session_id: c.env.sessionId,
        agent: c.env.agent,
        parent_run_id: undefined,
        data: c.data,
      });
    }
    inside += performance.now() - t;
    queue.length = 0;
    await turn();
  }
  return (inside * 1000) / N;
}

async function client() {
  // Room for every record: the calls outrun the server here, and this measures the calls.
  const db = new Decisionboard(URL_, KEY, { maxQueue: N });
  const elu = performance.eventLoopUtilization();
  const started = performance.now();
  let inside = 0;
  for (let done = 0; done < N; done += CHUNK) {
    const t = performance.now();
    for (let i = done; i < done + CHUNK; i++) {
      const c = calls[i % calls.length];
      c.method(db, c.data, c.env);
    }
    inside += performance.now() - t;
    await turn();
  }
  const flushed = await db.flush(300_000);
  const wall = performance.now() - started;
  const busy = performance.eventLoopUtilization(elu).active;
  await db.shutdown();
  const stats = db.stats();
  if (!flushed || stats.sent + stats.duplicates !== N || stats.dropped || stats.rejected) {
    throw new Error(`the client did not store every record: ${JSON.stringify(stats)}`);
  }
  return { callUs: (inside * 1000) / N, threadUs: (busy * 1000) / N, perSecond: (N * 1000) / wall };
}

async function plain(round) {
  const elu = performance.eventLoopUtilization();
  for (let done = 0; done < N; done += 500) {
    const parts = [];
    for (let i = done; i < Math.min(N, done + 500); i++) {
      const c = calls[i % calls.length];
      parts.push(
        JSON.stringify({
          id: `plain-${round}-${i}`,
          kind: c.kind,
          run_id: c.env.runId,
          ts: new Date().toISOString(),
          session_id: c.env.sessionId,
          agent: c.env.agent,
          data: c.data,
        }),
      );
    }
    const body = new Blob([`{"records":[${parts.join(",")}]}`]).stream().pipeThrough(new CompressionStream("gzip"));
    const response = await fetch(`${URL_}/api/v1/records`, {
      method: "POST",
      headers: { Authorization: `Bearer ${KEY}`, "Content-Type": "application/json", "Content-Encoding": "gzip" },
      body: await new Response(body).arrayBuffer(),
    });
    if (response.status !== 200) throw new Error(`HTTP ${response.status}: ${await response.text()}`);
  }
  return (performance.eventLoopUtilization(elu).active * 1000) / N;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const rounds = { floor: [], call: [], thread: [], perSecond: [], plain: [] };
for (let round = 0; round < ROUNDS; round++) {
  // The paths take turns, so that a shared machine's changing load weighs on all alike.
  rounds.floor.push(await floor());
  const measured = await client();
  rounds.call.push(measured.callUs);
  rounds.thread.push(measured.threadUs);
  rounds.perSecond.push(measured.perSecond);
  rounds.plain.push(await plain(round));
}
console.log(
  JSON.stringify({
    records: N,
    rounds: ROUNDS,
    call_us: median(rounds.call),
    floor_us: median(rounds.floor),
    thread_us: median(rounds.thread),
    plain_thread_us: median(rounds.plain),
    client_records_per_s: median(rounds.perSecond),
    each_round: rounds,
  }),
);

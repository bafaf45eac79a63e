// Every kind, sent through its own method in the shape its framework gives it, against the
// live product; tests/live/test_client_js.py then reads each one back through the read API.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { Decisionboard } from "decisionboard-client";

import { EXAMPLES, KEY, LIMITED_KEY, URL_, sent } from "./env.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const NOTICE = { code: "classifier.fallback", message: "m", detail: { from: "a", to: "b" } };

/** The method of each kind, fed the framework's object as it comes. */
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

test("every kind is stored as the framework gave it, through its own method", async () => {
  const examples = readFileSync(EXAMPLES, "utf8").split("\n").filter(Boolean).map(JSON.parse);
  assert.deepEqual(new Set(examples.map((r) => r.kind)), new Set(Object.keys(METHODS)));
  const db = new Decisionboard(URL_, KEY);
  const expected = [];
  for (const example of examples) {
    const record = { ...example, id: `js-${example.id}`, run_id: `js-${example.run_id}` };
    if (example.parent_run_id) record.parent_run_id = `js-${example.parent_run_id}`;
    const id = METHODS[example.kind](db, example.data, {
      runId: record.run_id,
      id: record.id,
      ts: example.ts,
      agent: example.agent,
      sessionId: example.session_id,
      parentRunId: record.parent_run_id,
    });
    assert.equal(id, record.id);
    expected.push(record);
  }
  // A record with nothing but its run: the client's own id and time, its default agent, and
  // the release given once at construction.
  const defaults = new Decisionboard(URL_, KEY, {
    agent: "js-agent",
    sessionId: "js-session",
    release: "js-2.4.0",
  });
  const id = defaults.notice(NOTICE, { runId: "js-defaults" });
  assert.match(id, /^dbc-[0-9a-f]{12}-0$/);
  expected.push({
    id,
    kind: "notice",
    run_id: "js-defaults",
    agent: "js-agent",
    session_id: "js-session",
    release: "js-2.4.0",
    data: NOTICE,
  });
  assert.equal(await db.shutdown(), true);
  assert.equal(await defaults.shutdown(), true);
  assert.deepEqual(
    [db.stats().sent, db.stats().rejected, db.stats().dropped, db.stats().lost],
    [examples.length, 0, 0, 0],
  );
  sent("every-kind", expected);
});

test("a provider's usage, as its API returns it, is stored counted once", async () => {
  const responses = JSON.parse(readFileSync(join(HERE, "provider-responses.json"), "utf8"));
  const db = new Decisionboard(URL_, KEY);
  const expected = [];
  responses.forEach(({ provider, response }, i) => {
    const call = {
      iteration: i,
      provider,
      model: "m",
      usage: response,
      stopReason: "stop",
      durationMs: 10,
    };
    const id = db.modelCall(call, { runId: "js-usage", id: `js-usage-${i}` });
    expected.push({ id, provider_response: response });
  });
  assert.equal(await db.shutdown(), true);
  assert.equal(db.stats().sent, responses.length);
  sent("usage", expected);
});

test("the server's own 429 and its Retry-After are waited out, and nothing is lost", async () => {
  // This key allows one request a second; each record goes in a request of its own.
  const db = new Decisionboard(URL_, LIMITED_KEY, { batchSize: 1, flushIntervalMs: 5 });
  const expected = [];
  const started = Date.now();
  for (let i = 0; i < 4; i++) {
    const id = db.notice(NOTICE, { runId: "js-limited" });
    expected.push({ id, kind: "notice", run_id: "js-limited", data: NOTICE });
  }
  assert.ok(Date.now() - started < 250, "recording waited on the server");
  assert.equal(await db.flush(30_000), true);
  const stats = db.stats();
  assert.deepEqual([stats.sent, stats.lost, stats.dropped], [4, 0, 0]);
  assert.ok(stats.retries >= 1, `retries ${stats.retries}`);
  // Four requests at one a second span at least three window boundaries.
  assert.ok(Date.now() - started >= 2_000, `took ${Date.now() - started} ms`);
  await db.shutdown();
  sent("limited", expected);
});

test("shutdown() sends what the timer had not yet sent", async () => {
  const db = new Decisionboard(URL_, KEY, { flushIntervalMs: 600_000, batchSize: 10_000 });
  const expected = [];
  for (let i = 0; i < 300; i++) {
    const data = { ...NOTICE, detail: { i } };
    expected.push({ id: db.notice(data, { runId: "js-shutdown" }), kind: "notice", run_id: "js-shutdown", data });
  }
  await new Promise((resolve) => setTimeout(resolve, 200));
  assert.equal(db.stats().sent, 0);
  assert.equal(await db.shutdown(), true);
  assert.deepEqual([db.stats().sent, db.stats().queue], [300, 0]);
  sent("shutdown", expected);
});

test("a process that just ends sends what is queued on its way out", () => {
  const child = spawnSync(process.execPath, [join(HERE, "exit-child.mjs")], {
    env: process.env,
    encoding: "utf8",
    timeout: 30_000,
  });
  assert.equal(child.status, 0, child.stderr);
  const stats = JSON.parse(child.stdout.trim().split("\n").at(-1));
  assert.deepEqual([stats.sent, stats.queue, stats.lost], [50, 0, 0]);
});

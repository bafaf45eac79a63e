// The OpenTelemetry route: decisionboard.<kind> events put on real SDK spans with
// addRecordEvent, sent by DecisionboardSpanProcessor through the client when the spans end.
import assert from "node:assert/strict";
import { test } from "node:test";

import { BasicTracerProvider } from "@opentelemetry/sdk-trace-base";
import { Decisionboard } from "decisionboard-client";
import { DecisionboardSpanProcessor, addRecordEvent } from "decisionboard-client/otel";

import { KEY, URL_, sent } from "./env.mjs";

const PICK = {
  iteration: 0,
  source: "classifier",
  classifier: { name: "anthropic", model: "claude-haiku-4-5" },
  offered: ["search_docs", "grep"],
  ranked: [{ name: "search_docs", score: 0.6 }],
  chosen: "search_docs",
  confidence: 0.6,
  latencyMs: 140.5,
  served: ["search_docs", "grep", "present"],
  narrowed: true,
};
// A turn whose text is JSON: it stays text, since `text` is not a list or an object.
const TURN = { protocol: "envelope", text: '{"action": "done"}', toolCalls: [{ name: "grep", arguments: { q: "x" } }] };
const NOTICE = { code: "classifier.contract_broken", message: "broke it", detail: { model: "qwen3-8b", streak: 2 } };

test("decisionboard events on spans reach Decisionboard as records of their run", async () => {
  const db = new Decisionboard(URL_, KEY);
  const provider = new BasicTracerProvider({ spanProcessors: [new DecisionboardSpanProcessor(db)] });
  const tracer = provider.getTracer("support-bot");
  const agent = tracer.startSpan("invoke_agent support", {
    attributes: {
      "gen_ai.operation.name": "invoke_agent",
      "gen_ai.agent.name": "support",
      "gen_ai.conversation.id": "js-conv",
      "decisionboard.run_id": "js-otel",
    },
  });
  const { trace, context } = await import("@opentelemetry/api");
  const inner = tracer.startSpan("classify", {}, trace.setSpan(context.active(), agent));
  inner.addEvent("not a decision");
  assert.equal(addRecordEvent(inner, "tool_choice.pick", PICK), true);
  assert.equal(addRecordEvent(inner, "turn", TURN, { id: "js-otel-turn", agent: "planner" }), true);
  inner.end();
  assert.equal(addRecordEvent(agent, "notice", NOTICE), true);
  agent.end();
  assert.equal(addRecordEvent({ addEvent: () => { throw new Error("ended"); } }, "notice", NOTICE), false);
  await provider.forceFlush();
  assert.equal(await db.shutdown(), true);
  assert.deepEqual([db.stats().sent, db.stats().rejected], [3, 0]);

  const traceId = agent.spanContext().traceId;
  const scope = { run_id: "js-otel", session_id: "js-conv" };
  sent("otel", [
    { id: `otel:${traceId}:${inner.spanContext().spanId}:1`, kind: "tool_choice.pick", ...scope, agent: "support", data: PICK },
    { id: "js-otel-turn", kind: "turn", ...scope, agent: "planner", data: TURN },
    { id: `otel:${traceId}:${agent.spanContext().spanId}:0`, kind: "notice", ...scope, agent: "support", data: NOTICE },
  ]);
  await provider.shutdown();
});

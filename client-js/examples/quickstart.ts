import { Decisionboard } from "decisionboard-client";

const db = new Decisionboard(process.env.DECISIONBOARD_URL!, process.env.DECISIONBOARD_KEY!, {
  agent: "support-bot",
  sessionId: "sess-1",
  release: "2026.12.1", // what the agent runs as: its version, a prompt hash or a git sha
});

// agentfootprint's ToolChoiceRow, as the classifier filed it.
db.toolChoice(
  {
    kind: "pick",
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
  },
  { runId: "run-ts-1" },
);

// The provider's usage as its SDK returned it: cached and reasoning tokens are counted once.
db.modelCall(
  {
    iteration: 0,
    provider: "openai",
    model: "gpt-4o",
    usage: { prompt_tokens: 2006, completion_tokens: 300, prompt_tokens_details: { cached_tokens: 1920 } },
    stopReason: "toolUse",
    durationMs: 1800,
  },
  { runId: "run-ts-1" },
);

// MemberJunction's RawTurn and a classifier-ladder verdict, as they come.
db.turn({ protocol: "envelope", toolCalls: [{ name: "search_docs", arguments: { q: "refund" } }] }, { runId: "run-ts-1" });
db.classifierVerdict(
  {
    toolName: "send_email",
    toolCallId: "call-1",
    model: "qwen3-8b",
    rung: 0,
    seat: "off",
    reask: false,
    outcome: "ruled",
    verdict: "allow",
    station: "leg",
    wallMs: 300,
  },
  { runId: "run-ts-1" },
);
db.record("reliability", { type: "circuit_changed", state: "open" }, { runId: "run-ts-1" });

// Before the process exits on its own: send what is queued (at most 5 s).
await db.shutdown();
console.log(JSON.stringify(db.stats()));

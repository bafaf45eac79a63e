// A CommonJS consumer: `require` resolves the CommonJS build and its own declarations.
import client = require("decisionboard-client");
import otel = require("decisionboard-client/otel");

const db: client.Decisionboard = new client.Decisionboard("http://127.0.0.1:8000", "dbk_x");
const usage: client.CallUsage | undefined = client.callUsage({ input_tokens: 1, output_tokens: 2 });
export const processor = new otel.DecisionboardSpanProcessor(db);
export const sent = db.modelCall(
  { iteration: 0, provider: "anthropic", model: "m", usage, stopReason: "stop", durationMs: 1 },
  { runId: "r" },
);

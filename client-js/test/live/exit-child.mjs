// An agent that records and returns without calling shutdown(): the client sends what is
// queued when Node's event loop empties (beforeExit), then lets the process end.
import { Decisionboard } from "decisionboard-client";

import { KEY, URL_, sent } from "./env.mjs";

const db = new Decisionboard(URL_, KEY, { flushIntervalMs: 600_000 });
const expected = [];
for (let i = 0; i < 50; i++) {
  const data = { code: "agent.done", message: `step ${i}`, detail: {} };
  expected.push({ id: db.notice(data, { runId: "js-exit" }), kind: "notice", run_id: "js-exit", data });
}
sent("exit", expected);
process.on("exit", () => console.log(JSON.stringify(db.stats())));

// The frameworks' own declarations, as their packages spell them (interfaces, plain `string`
// where the record knows a few values, read-only arrays, nulls): the client's methods must take
// their values as they are. This file is type-checked by `npm test`; a shape the client's types
// refuse fails the build.
import { Decisionboard, type CallUsage } from "decisionboard-client";

interface ClassifierRef {
  readonly name: string;
  readonly model: string;
}
interface PickRow {
  readonly kind: "pick";
  readonly iteration: number;
  readonly source: "classifier";
  readonly classifier: ClassifierRef;
  readonly offered: readonly string[];
  readonly ranked: ReadonlyArray<{ readonly name: string; readonly score: number }>;
  readonly chosen?: string;
  readonly confidence: number;
  readonly usage?: { readonly inputTokens: number; readonly outputTokens: number };
  readonly latencyMs: number;
  readonly served: readonly string[];
  readonly narrowed: boolean;
  readonly narrowedSkipped?: string;
}
interface PickErrorRow {
  readonly kind: "pick-error";
  readonly iteration: number;
  readonly source: "classifier";
  readonly classifier: { readonly name: string; readonly model?: string };
  readonly status?: number;
  readonly message: string;
  readonly latencyMs: number;
  readonly served: readonly string[];
  readonly narrowedSkipped?: string;
}
interface OutcomeRow {
  readonly kind: "outcome";
  readonly iteration: number;
  readonly called: readonly string[];
  readonly firstAgrees?: boolean;
  readonly miss?: { readonly wanted: readonly string[] };
}
type ToolChoiceRow = PickRow | PickErrorRow | OutcomeRow;

interface RawToolCall {
  name: string;
  arguments?: Record<string, unknown>;
}
interface RawTurn {
  protocol?: string;
  text?: string;
  toolCalls?: RawToolCall[];
  toolNameMap?: Record<string, string>;
  controlToolMap?: Record<string, { kind: string; name?: string }>;
  finishReason?: string;
  executionError?: Error | string;
  durationMs?: number;
  totalCost?: number;
}

interface LadderVerdict {
  toolName: string;
  toolCallId: string;
  model: string;
  seatModel: string | null;
  rung: 0 | 1;
  seat: string;
  reask: boolean;
  outcome: string;
  verdict?: string;
  form?: string;
  cause?: string;
  disposition?: string;
  station: string;
  wallMs: number;
  budgetMs?: number;
}

interface ModelSelection {
  step: number;
  default_model: string;
  selected_model: string;
  previous_model: string | null;
  action: string;
  stop_reason: string | null;
  retry: boolean;
}

declare const row: ToolChoiceRow;
declare const turn: RawTurn;
declare const verdict: LadderVerdict;
declare const selection: ModelSelection;
declare const openaiResponse: { usage: { prompt_tokens: number; completion_tokens: number } };

const db = new Decisionboard("http://127.0.0.1:8000", "dbk_x");
const env = { runId: "r" };
db.toolChoice(row, env);
if (row.kind === "pick") db.toolChoicePick(row, env);
if (row.kind === "pick-error") db.toolChoicePickError(row, env);
if (row.kind === "outcome") db.toolChoiceOutcome(row, env);
db.turn(turn, env);
db.classifierVerdict(verdict, env);
db.modelSelection(selection, env);
db.modelCall({ iteration: 0, provider: "openai", model: "gpt-4o", usage: openaiResponse, stopReason: "stop", durationMs: 1 }, env);
const usage: CallUsage = { input: 1, output: 2 };
db.modelCall({ iteration: 0, provider: "openai", model: "gpt-4o", usage, stopReason: "stop", durationMs: 1 }, env);
// @ts-expect-error a record needs its run
db.turn(turn, {});

/**
 * Send decision records to Decisionboard (`POST /api/v1/records`) without ever slowing or
 * breaking the agent. One method per record kind; each queues and returns the record's id at
 * once, and never throws.
 */

import { type Envelope, RecordQueue } from "./client.js";
import type {
  LadderVerdict,
  ModelCall,
  ModelSelection,
  Notice,
  ProviderError,
  RawTurn,
  Reliability,
  ToolChoiceOutcome,
  ToolChoicePick,
  ToolChoicePickError,
  ToolChoiceRow,
} from "./kinds.js";
import { TOOL_CHOICE_KINDS } from "./kinds.js";
import { callUsage } from "./provider-usage.js";

export type { ClientOptions, ClientStats, Envelope, Timestamp } from "./client.js";
export { retryAfterMs } from "./client.js";
export * from "./kinds.js";
export * from "./provider-usage.js";

/**
 * `new Decisionboard(url, key, options)`; then one method per kind (`toolChoice(row, {runId})`,
 * `modelCall(call, {runId})`, ...) or `record(kind, data, {runId})`. The data object is
 * serialised when its batch is sent: do not change it after the call.
 */
export class Decisionboard extends RecordQueue {
  /** An agentfootprint ToolChoiceRow of any kind: `pick`, `pick-error` or `outcome`. */
  toolChoice(row: ToolChoiceRow, envelope: Envelope): string | undefined {
    const kind = TOOL_CHOICE_KINDS[(row as { kind?: string } | null)?.kind ?? ""];
    if (kind === undefined) {
      return this.refuse(`toolChoice: a ToolChoiceRow's kind is pick, pick-error or outcome`);
    }
    return this.record(kind, row, envelope);
  }

  /** One classifier pick, filed before the model call. */
  toolChoicePick(pick: ToolChoicePick, envelope: Envelope): string | undefined {
    return this.record("tool_choice.pick", pick, envelope);
  }

  /** The classifier call failed; the full set was served. */
  toolChoicePickError(error: ToolChoicePickError, envelope: Envelope): string | undefined {
    return this.record("tool_choice.pick_error", error, envelope);
  }

  /** What the model then called, and whether it agreed with the top pick. */
  toolChoiceOutcome(outcome: ToolChoiceOutcome, envelope: Envelope): string | undefined {
    return this.record("tool_choice.outcome", outcome, envelope);
  }

  /** One model-selection event per model-call step (rig ModelSelection). */
  modelSelection(selection: ModelSelection, envelope: Envelope): string | undefined {
    return this.record("model_selection", selection, envelope);
  }

  /** What the harness observed on the wire before normalisation (MemberJunction RawTurn). */
  turn(turn: RawTurn, envelope: Envelope): string | undefined {
    return this.record("turn", turn, envelope);
  }

  /** One classification of a gated tool call on one rung of the classifier ladder. */
  classifierVerdict(verdict: LadderVerdict, envelope: Envelope): string | undefined {
    return this.record("classifier.verdict", verdict, envelope);
  }

  /** An engine notice (`code` dotted, e.g. classifier.contract_broken). */
  notice(notice: Notice, envelope: Envelope): string | undefined {
    const data = notice?.detail === undefined && notice ? { ...notice, detail: {} } : notice;
    return this.record("notice", data, envelope);
  }

  /** A provider refused or failed a request. */
  providerError(error: ProviderError, envelope: Envelope): string | undefined {
    return this.record("provider.error", error, envelope);
  }

  /** Retry, fallback and circuit events (agentfootprint). */
  reliability(event: Reliability, envelope: Envelope): string | undefined {
    return this.record("reliability", event, envelope);
  }

  /**
   * One model call. `usage` is a CallUsage, or the provider's usage as it came (OpenAI,
   * Anthropic, Gemini or LangChain; the usage object or the whole response), which callUsage
   * turns into one so that cached and reasoning tokens are counted once. A usage of a shape it
   * does not know is sent as it is, for the server to accept or reject.
   */
  modelCall(call: ModelCall, envelope: Envelope): string | undefined {
    const converted = call ? callUsage(call.usage) : undefined;
    return this.record("model_call", converted ? { ...call, usage: converted } : call, envelope);
  }
}

export default Decisionboard;

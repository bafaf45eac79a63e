/**
 * The data of each record kind (docs/architecture.md, "Record kinds"), field names as the
 * emitting framework spells them: camelCase for agentfootprint (ToolChoiceRow, reliability) and
 * MemberJunction (RawTurn), snake_case for rig (ModelSelection).
 *
 * The types accept the frameworks' own values as they are: read-only arrays, `null` for an
 * absent optional field, and a framework's wider `string` where the record names the values
 * it knows (`OneOf`). Fields a kind does not declare are kept as posted by the server.
 */

/** One of the values the record knows, or any other string a framework may send. */
// `string & {}` keeps the known values offered by editors while accepting any string.
export type OneOf<T extends string> = T | (string & {});

export type SkipReason = OneOf<"unavailable" | "too-few" | "after-miss" | "wrap-up">;

export interface RankedTool {
  name: string;
  score: number;
}

// --- tool_choice.* (agentfootprint ToolChoiceRow) -------------------------------------------

/** A `tool_choice.pick`: one classifier pick, filed before the model call. */
export interface ToolChoicePick {
  /** ToolChoiceRow's discriminator, kept in the data when present. */
  kind?: "pick";
  iteration: number;
  source?: "classifier";
  classifier: { name: string; model: string };
  offered: readonly string[];
  ranked: readonly RankedTool[];
  chosen?: string | null;
  confidence: number;
  usage?: { inputTokens?: number | null; outputTokens?: number | null } | null;
  latencyMs: number;
  served: readonly string[];
  narrowed: boolean;
  narrowedSkipped?: SkipReason | null;
}

/** A `tool_choice.pick_error`: the classifier call failed; the full set was served. */
export interface ToolChoicePickError {
  kind?: "pick-error";
  iteration: number;
  source?: "classifier";
  classifier: { name: string; model?: string | null };
  status?: number | null;
  message: string;
  latencyMs: number;
  served: readonly string[];
  narrowedSkipped?: SkipReason | null;
}

/** A `tool_choice.outcome`: what the model then called. */
export interface ToolChoiceOutcome {
  kind?: "outcome";
  iteration: number;
  called: readonly string[];
  firstAgrees?: boolean | null;
  miss?: { wanted: readonly string[] } | null;
}

/** agentfootprint's ToolChoiceRow: one of the three, told apart by `kind`. */
export type ToolChoiceRow =
  | (ToolChoicePick & { kind: "pick" })
  | (ToolChoicePickError & { kind: "pick-error" })
  | (ToolChoiceOutcome & { kind: "outcome" });

// --- model_selection (rig ModelSelection) ------------------------------------------------------

export interface ModelSelection {
  step: number;
  default_model: string;
  selected_model: string;
  previous_model?: string | null;
  action: OneOf<"continue" | "select" | "stop">;
  stop_reason?: string | null;
  retry?: boolean | null;
  request_patch?: {
    preamble?: string | null;
    temperature?: number | null;
    max_tokens?: number | null;
    tool_choice?: unknown;
    active_tools?: readonly string[] | null;
    additional_params?: Readonly<Record<string, unknown>> | null;
  } | null;
  capabilities?: {
    composes_native_output_with_tools?: boolean | null;
    accepts_forced_tool_choice?: boolean | null;
  } | null;
}

// --- turn (MemberJunction RawTurn) ---------------------------------------------------------------

export interface ControlTool {
  kind: OneOf<"subAgent" | "payloadChange" | "chat" | "taskComplete">;
  name?: string | null;
}

/** MemberJunction's RawTurn: what the harness observed on the wire before normalisation. */
export interface RawTurn {
  protocol?: OneOf<"envelope" | "hybrid" | "implicit"> | null;
  text?: string | null;
  toolCalls?: readonly { name: string; arguments?: unknown }[] | null;
  toolNameMap?: Readonly<Record<string, string>> | null;
  controlToolMap?: Readonly<Record<string, ControlTool>> | null;
  finishReason?: string | null;
  executionError?: unknown;
  durationMs?: number | null;
  totalCost?: number | null;
  /** The tools the call was offered, when known: with them a turn is a tool decision. */
  offered?: readonly string[] | null;
  iteration?: number | null;
}

// --- classifier.verdict (the classifier ladder) -------------------------------------------------

/** One classification of a gated tool call on one rung of the classifier ladder. */
export interface LadderVerdict {
  toolName: string;
  toolCallId: string;
  model: string;
  seatModel?: string | null;
  rung: number;
  seat: OneOf<"off" | "low" | "think">;
  reask: boolean;
  outcome: OneOf<"ruled" | "parse_error" | "unavailable">;
  verdict?: OneOf<"allow" | "block"> | null;
  form?: OneOf<"missing" | "conflict"> | null;
  cause?: OneOf<"timeout" | "error"> | null;
  disposition?: OneOf<"asked" | "denied"> | null;
  station: OneOf<"leg" | "ancestor">;
  wallMs: number;
  budgetMs?: number | null;
}

// --- notice, provider.error, reliability ---------------------------------------------------------

export interface Notice {
  /** Dotted, e.g. classifier.contract_broken. */
  code: string;
  level?: OneOf<"debug" | "info" | "warn" | "error"> | null;
  audience?: OneOf<"operator" | "user" | "developer"> | null;
  message: string;
  /** Defaults to {} when left out. */
  detail?: Readonly<Record<string, unknown>>;
}

export interface ProviderError {
  error: string;
  provider: string;
  model: string;
  retryable: boolean;
  status?: number | null;
  message?: string | null;
  toolChoice?: { type: string; name?: string | null } | null;
}

/** agentfootprint's reliability events: retries, fallbacks, circuit changes. */
export interface Reliability {
  type: OneOf<"retried" | "recovered" | "fail_fast" | "fallback_triggered" | "circuit_changed">;
  attempt?: number | null;
  fromProvider?: string | null;
  toProvider?: string | null;
  errorKind?: OneOf<
    "ok" | "5xx-transient" | "rate-limit" | "circuit-open" | "schema-fail" | "unknown"
  > | null;
  recoveredVia?: string | null;
  primary?: string | null;
  fallback?: string | null;
  reason?: string | null;
  state?: OneOf<"closed" | "open" | "half-open"> | null;
  providerName?: string | null;
}

// --- model_call ------------------------------------------------------------------------------------

export interface ModelCall<Usage = unknown> {
  iteration: number;
  provider: string;
  model: string;
  /**
   * A CallUsage, or the provider's usage as it came (OpenAI, Anthropic, Gemini or LangChain),
   * which is converted so that cached and reasoning tokens are counted once.
   */
  usage: Usage;
  stopReason: string;
  durationMs: number;
  toolsCount?: number | null;
  messagesCount?: number | null;
}

/** The record kinds the server knows. */
export const KIND_NAMES = [
  "tool_choice.pick",
  "tool_choice.pick_error",
  "tool_choice.outcome",
  "model_selection",
  "turn",
  "classifier.verdict",
  "notice",
  "provider.error",
  "reliability",
  "model_call",
] as const;

export type KindName = (typeof KIND_NAMES)[number];

/** ToolChoiceRow's `kind` → the record kind. */
export const TOOL_CHOICE_KINDS: Readonly<Record<string, KindName>> = {
  pick: "tool_choice.pick",
  "pick-error": "tool_choice.pick_error",
  pick_error: "tool_choice.pick_error",
  outcome: "tool_choice.outcome",
};

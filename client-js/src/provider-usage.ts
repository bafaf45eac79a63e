/**
 * A provider's token usage, as its API or SDK returns it, in a `model_call`'s terms.
 *
 * A `model_call`'s usage counts each token once: `input` excludes the cache reads (`cacheRead`)
 * and cache writes (`cacheWrite`), `output` excludes the reasoning tokens (`thinking`). That is
 * Anthropic's convention. OpenAI's (and Gemini's, and LangChain's) prompt count includes the
 * cached tokens and its completion count the reasoning tokens, so copying those counts as they
 * are charges the cached and reasoning tokens twice; nothing in the stored record can show it.
 * These functions take the provider's usage as it came (a plain object, or an SDK object read
 * by property) and return the disjoint counts.
 *
 * `callUsage` recognises the shape itself; the `usageFrom*` functions say which it is. Each
 * returns undefined for something it cannot read, rather than throw into the agent.
 */

/** A `model_call`'s usage: disjoint counts, each token in one of them. */
export interface CallUsage {
  input: number;
  output: number;
  cacheRead?: number;
  cacheWrite?: number;
  thinking?: number;
}

const OURS = new Set(["input", "output", "cacheRead", "cacheWrite", "thinking"]);

type Step = string | readonly string[];

function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === "object";
}

/** The first of `names` that `source` holds (not null or undefined). */
function get(source: unknown, names: readonly string[]): unknown {
  if (!isObject(source)) return undefined;
  for (const name of names) {
    const value = source[name];
    if (value !== undefined && value !== null) return value;
  }
  return undefined;
}

function has(source: unknown, ...names: string[]): boolean {
  return isObject(source) && names.some((name) => name in source);
}

/** A token count at `path` (each step a name, or the names it may go by); 0 when absent. */
function count(source: unknown, ...path: Step[]): number {
  let value: unknown = source;
  for (const step of path) {
    if (value === undefined) return 0;
    value = get(value, typeof step === "string" ? [step] : step);
  }
  if (typeof value !== "number" || !Number.isFinite(value)) return 0;
  return Math.max(0, Math.trunc(value));
}

function usage(fresh: number, output: number, cacheRead = 0, cacheWrite = 0, thinking = 0): CallUsage {
  const out: CallUsage = { input: Math.max(0, fresh), output: Math.max(0, output) };
  // Zero counts are left out, as a record without cache or reasoning tokens would be.
  if (cacheRead) out.cacheRead = cacheRead;
  if (cacheWrite) out.cacheWrite = cacheWrite;
  if (thinking) out.thinking = thinking;
  return out;
}

/** The usage inside a whole response (`response.usage`), or `source` itself. */
function unwrap(source: unknown, ...names: string[]): unknown {
  const inner = get(source, names);
  return inner !== undefined ? inner : source;
}

/**
 * OpenAI's usage, of Chat Completions (`prompt_tokens`, `completion_tokens` and their
 * `*_details`) or of the Responses API (`input_tokens`, `output_tokens`,
 * `input_tokens_details.cached_tokens`, `output_tokens_details.reasoning_tokens`). Both include
 * the cached tokens (read, and written where `cache_write_tokens` says so) in the prompt count
 * and the reasoning tokens in the output count; they are taken out here. Also for Azure OpenAI
 * and the OpenAI-compatible APIs that report usage the same way.
 */
export function usageFromOpenAI(source: unknown): CallUsage | undefined {
  try {
    const u = unwrap(source, "usage");
    let prompt: number, completion: number, reasoning: number, details: string;
    if (has(u, "prompt_tokens", "completion_tokens")) {
      prompt = count(u, "prompt_tokens");
      completion = count(u, "completion_tokens");
      details = "prompt_tokens_details";
      reasoning = count(u, "completion_tokens_details", "reasoning_tokens");
    } else if (has(u, "input_tokens", "output_tokens")) {
      prompt = count(u, "input_tokens");
      completion = count(u, "output_tokens");
      details = "input_tokens_details";
      reasoning = count(u, "output_tokens_details", "reasoning_tokens");
    } else {
      return undefined;
    }
    const cached = count(u, details, "cached_tokens");
    const written = count(u, details, "cache_write_tokens");
    return usage(prompt - cached - written, completion - reasoning, cached, written, reasoning);
  } catch {
    return undefined; // an SDK object that misbehaves must not reach the agent
  }
}

/**
 * Anthropic's usage (`input_tokens`, `output_tokens`, `cache_read_input_tokens`,
 * `cache_creation_input_tokens`): already disjoint. Its output count includes any extended
 * thinking, which the API does not report apart, so `thinking` stays out.
 */
export function usageFromAnthropic(source: unknown): CallUsage | undefined {
  try {
    const u = unwrap(source, "usage");
    if (!has(u, "input_tokens", "output_tokens")) return undefined;
    return usage(
      count(u, "input_tokens"),
      count(u, "output_tokens"),
      count(u, "cache_read_input_tokens"),
      count(u, "cache_creation_input_tokens"),
    );
  } catch {
    return undefined;
  }
}

/**
 * Google Gemini's `usageMetadata` (REST and @google/genai, camelCase) or `usage_metadata`
 * (snake_case). `promptTokenCount` includes `cachedContentTokenCount`, which is taken out;
 * `candidatesTokenCount` excludes `thoughtsTokenCount`; `toolUsePromptTokenCount` (the prompt
 * of a built-in tool) is input too.
 */
export function usageFromGemini(source: unknown): CallUsage | undefined {
  try {
    const u = unwrap(source, "usageMetadata", "usage_metadata");
    const promptNames = ["promptTokenCount", "prompt_token_count"];
    if (!has(u, ...promptNames, "candidatesTokenCount", "candidates_token_count")) return undefined;
    const cached = count(u, ["cachedContentTokenCount", "cached_content_token_count"]);
    return usage(
      count(u, promptNames) +
        count(u, ["toolUsePromptTokenCount", "tool_use_prompt_token_count"]) -
        cached,
      count(u, ["candidatesTokenCount", "candidates_token_count"]),
      cached,
      0,
      count(u, ["thoughtsTokenCount", "thoughts_token_count"]),
    );
  } catch {
    return undefined;
  }
}

/**
 * LangChain's `usage_metadata` (`input_tokens` and `output_tokens` are sums of every kind,
 * `input_token_details` has `cache_read` and `cache_creation`, `output_token_details` has
 * `reasoning`), whichever provider the chat model talks to.
 */
export function usageFromLangChain(source: unknown): CallUsage | undefined {
  try {
    const u = unwrap(source, "usage_metadata");
    if (!has(u, "input_tokens", "output_tokens")) return undefined;
    const read = count(u, "input_token_details", "cache_read");
    const write = count(u, "input_token_details", "cache_creation");
    const reasoning = count(u, "output_token_details", "reasoning");
    return usage(
      count(u, "input_tokens") - read - write,
      count(u, "output_tokens") - reasoning,
      read,
      write,
      reasoning,
    );
  } catch {
    return undefined;
  }
}

/**
 * A `model_call`'s usage from any of the shapes above, told apart by their fields; a usage
 * already in the record's terms comes back as it is. Undefined when the shape is unknown.
 */
export function callUsage(source: unknown): CallUsage | undefined {
  try {
    if (isObject(source) && "input" in source && Object.keys(source).every((k) => OURS.has(k))) {
      return { ...source } as unknown as CallUsage;
    }
    const inner = unwrap(source, "usage", "usageMetadata", "usage_metadata");
    if (has(inner, "prompt_tokens", "completion_tokens", "input_tokens_details")) {
      return usageFromOpenAI(inner);
    }
    if (has(inner, "cache_read_input_tokens", "cache_creation_input_tokens")) {
      return usageFromAnthropic(inner);
    }
    if (has(inner, "input_token_details", "output_token_details")) return usageFromLangChain(inner);
    if (has(inner, "promptTokenCount", "prompt_token_count")) return usageFromGemini(inner);
    if (has(inner, "input_tokens", "output_tokens")) {
      // Input and output alone: no cached or reasoning tokens to tell the conventions apart.
      return usageFromAnthropic(inner);
    }
  } catch {
    return undefined;
  }
  return undefined;
}

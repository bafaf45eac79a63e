"""The Vercel AI SDK's spans (`ai` 4 to 7) as plain data.

Two shapes reach /v1/traces:

- the AI SDK's own telemetry (`experimental_telemetry` in `ai` 4 to 6, and `LegacyOpenTelemetry`
  of `@ai-sdk/otel` for `ai` 7): spans named by `ai.operationId`. `ai.generateText`,
  `ai.streamText`, `ai.generateObject` and `ai.streamObject` are a run's structure, their
  `ai.model.id` the configured model; each `….doGenerate` / `….doStream` is one model call
  (`ai.model.*`, `gen_ai.request.model`, `ai.usage.*` / `gen_ai.usage.*`, offered tools in
  `ai.prompt.tools`, the forced choice in `ai.prompt.toolChoice`, called tools with their ids in
  `ai.response.toolCalls`); `ai.toolCall` is one tool's execution (`ai.toolCall.name`,
  `ai.toolCall.id`, `ai.toolCall.args`); `ai.telemetry.functionId` names the agent and
  `ai.telemetry.metadata.*` carries the caller's metadata;
- `OpenTelemetry` of `@ai-sdk/otel` (`ai` 7): GenAI conventions (`invoke_agent`, `agent_step`,
  `chat`, `execute_tool`), read by records.formats.genai_messages; this module only names the
  `agent_step` spans as structure and reads the agent's configured model.

Pure functions; records.formats.otlp_mapping calls them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from records.formats import genai_messages
from records.formats.attributes import (
    KeySetCache,
    count,
    json_value,
    text,
    tool_names,
)
from records.formats.llm_read import LlmRead, tool_call

OPERATION_ID = "ai.operationId"
MODEL_ID = "ai.model.id"
MODEL_PROVIDER = "ai.model.provider"
FUNCTION_ID = "ai.telemetry.functionId"
METADATA = "ai.telemetry.metadata."
# AI SDK 7's runtime context, on its agent and step spans when the integration includes it.
RUNTIME_CONTEXT = "ai.settings.context."
PROMPT_TOOLS = "ai.prompt.tools"
PROMPT_TOOL_CHOICE = "ai.prompt.toolChoice"
PROMPT_MESSAGES = "ai.prompt.messages"
RESPONSE_TOOL_CALLS = "ai.response.toolCalls"
RESPONSE_MODEL = "ai.response.model"
RESPONSE_FINISH_REASON = "ai.response.finishReason"
TOOL_CALL_NAME = "ai.toolCall.name"
TOOL_CALL_ID = "ai.toolCall.id"
TOOL_CALL_ARGS = "ai.toolCall.args"
# Token counts by AI SDK version: 5 and later, then 4.
INPUT_TOKENS = ("ai.usage.inputTokens", "ai.usage.promptTokens")
OUTPUT_TOKENS = ("ai.usage.outputTokens", "ai.usage.completionTokens")
CACHE_READ_TOKENS = ("ai.usage.inputTokenDetails.cacheReadTokens", "ai.usage.cachedInputTokens")
CACHE_WRITE_TOKENS = ("ai.usage.inputTokenDetails.cacheWriteTokens",)
REASONING_TOKENS = ("ai.usage.outputTokenDetails.reasoningTokens", "ai.usage.reasoningTokens")

# The calls that make a run: their spans hold the model calls and tool calls.
OUTER = frozenset({"ai.generateText", "ai.streamText", "ai.generateObject", "ai.streamObject"})
MODEL_CALLS = frozenset(f"{outer}.{call}" for outer in OUTER for call in ("doGenerate", "doStream"))
TOOL_CALL = "ai.toolCall"
# GenAI operations the AI SDK 7 integration adds besides the conventions' own: one step of an
# agent's loop, the parent of that step's model call and tool calls.
AGENT_STEP = "agent_step"
STRUCTURE_OPERATIONS = frozenset({AGENT_STEP})

# Metadata keys that name the session and the user (the AI SDK leaves their names to the caller).
SESSION_KEYS = tuple(
    f"{prefix}{key}"
    for prefix in (METADATA, RUNTIME_CONTEXT)
    for key in ("sessionId", "session_id", "conversationId")
)
USER_KEYS = ("userId", "user_id", "user.id")
# Metadata is kept in the record only when small: it is free-form.
MAX_METADATA_CHARS = 4096
# Providers as the AI SDK names them (`openai.chat`) → as the GenAI conventions name them, the
# same table as @ai-sdk/otel's, so a model call is the same provider from every AI SDK version.
_PROVIDERS = (
    ("google.vertex", "gcp.vertex_ai"),
    ("google.generative-ai", "gcp.gemini"),
    ("google-vertex", "gcp.vertex_ai"),
    ("amazon-bedrock", "aws.bedrock"),
    ("azure-openai", "azure.ai.openai"),
    ("anthropic", "anthropic"),
    ("openai", "openai"),
    ("azure", "azure.ai.inference"),
    ("google", "gcp.gemini"),
    ("mistral", "mistral_ai"),
)


def operation_id(span_name: str, attributes: dict[str, Any]) -> str | None:
    """The AI SDK operation a span records (`ai.operationId`, else an `ai.` span name)."""
    value = attributes.get(OPERATION_ID)
    if isinstance(value, str) and value.startswith("ai."):
        return value
    return span_name if span_name.startswith("ai.") else None


def is_model_call(operation: str | None) -> bool:
    return operation in MODEL_CALLS


def is_tool(operation: str | None) -> bool:
    return operation == TOOL_CALL


def is_structure(operation: str | None, gen_ai_operation: str | None) -> bool:
    """The spans around the calls: the AI SDK's outer spans, its other operations (embeddings,
    reranking, speech: no decision in them), the GenAI `agent_step`, and the operations AI SDK 7
    names by their `ai.` id for want of a GenAI name (`ai.generateSpeech`, `ai.transcribe`)."""
    if gen_ai_operation is not None:
        return gen_ai_operation in STRUCTURE_OPERATIONS or gen_ai_operation.startswith("ai.")
    return operation is not None and not is_model_call(operation) and not is_tool(operation)


@functools.lru_cache(maxsize=256)  # a few names, on every call
def provider_name(provider: str | None) -> str | None:
    if provider is None:
        return None
    lower = provider.lower()
    for prefix, mapped in _PROVIDERS:
        if lower.startswith(prefix):
            return mapped
    return lower.split(".", 1)[0] or provider


def configured_model(operation: str | None, gen_ai_operation: str | None, a: dict) -> str | None:
    """The model an agent span says the agent was configured with: `invoke_agent`'s
    `gen_ai.request.model`, the AI SDK outer span's `ai.model.id`; None for any other span."""
    if gen_ai_operation == "invoke_agent":
        return text(a.get(genai_messages.REQUEST_MODEL))
    if gen_ai_operation is None and operation in OUTER:
        return text(a.get(MODEL_ID)) or text(a.get(genai_messages.REQUEST_MODEL))
    return None


def step_tool_choice(gen_ai_operation: str | None, a: dict[str, Any]) -> dict[str, str] | None:
    """The tool choice an AI SDK 7 `agent_step` span forced on its model call."""
    if gen_ai_operation != AGENT_STEP:
        return None
    return tool_choice(a.get(PROMPT_TOOL_CHOICE))


def _first_count(a: dict[str, Any], names: tuple[str, ...]) -> int | None:
    for name in names:
        value = count(a.get(name))
        if value is not None:
            return value
    return None


def read_llm(
    attributes: dict[str, Any], events: list[tuple[str, dict[str, Any]]], status_message: str
) -> LlmRead:
    """A `doGenerate` / `doStream` span's model call, tools and failure. `events` as (name,
    attributes) of its span events."""
    a = attributes
    out = LlmRead("ai_sdk")
    # What the AI SDK spans spell as the GenAI conventions do (AI SDK 5 on adds gen_ai.*
    # attributes), then the ai.* attributes for what those leave unsaid.
    keys = _key_set(a)
    genai_messages.read_usage(a, out, keys.usage)
    if events or keys.genai_tools:
        genai_messages.read_tools(a, events, out)
    genai_messages.read_failure(a, events, status_message, out)
    out.provider = provider_name(text(a.get(MODEL_PROVIDER)) or out.provider)
    out.request_model = out.request_model or text(a.get(MODEL_ID))
    out.response_model = out.response_model or text(a.get(RESPONSE_MODEL))
    if out.input_tokens is None:
        out.input_tokens = _first_count(a, keys.input_tokens)
    if out.output_tokens is None:
        out.output_tokens = _first_count(a, keys.output_tokens)
    if out.cache_read is None:
        out.cache_read = _first_count(a, keys.cache_read)
    if out.cache_write is None:
        out.cache_write = _first_count(a, keys.cache_write)
    if out.thinking is None:
        out.thinking = _first_count(a, keys.thinking)
    if not out.finish_reasons:
        reason = text(a.get(RESPONSE_FINISH_REASON))
        out.finish_reasons = [reason] if reason else []
    if PROMPT_TOOLS in a:
        out.offered = _offered(a[PROMPT_TOOLS], out.problems)
    if RESPONSE_TOOL_CALLS in a:
        out.called = _called(a[RESPONSE_TOOL_CALLS], out.problems)
    if out.messages_count is None and isinstance(a.get(PROMPT_MESSAGES), str):
        messages = json_value(a[PROMPT_MESSAGES])
        out.messages_count = len(messages) if isinstance(messages, list) else None
    out.tool_choice = tool_choice(a.get(PROMPT_TOOL_CHOICE))
    out.extra.update(caller_metadata(a, keys.metadata))
    if out.provider is None:
        out.missing.append(MODEL_PROVIDER)
    if out.request_model is None and out.response_model is None:
        out.missing.append(MODEL_ID)
    return out


def _offered(value: Any, problems: list[str]) -> list[str] | None:
    """`ai.prompt.tools`: an array of JSON strings, one a tool (or one JSON array)."""
    tools = json_value(value) if isinstance(value, str) else value
    if not isinstance(tools, list):
        problems.append(f"{PROMPT_TOOLS} is not an array of tool definitions")
        return None
    return tool_names(tools, PROMPT_TOOLS, problems)


def _called(value: Any, problems: list[str]) -> list[dict[str, Any]]:
    """`ai.response.toolCalls`: [{toolCallId, toolName, input}] (`args` in AI SDK 4)."""
    calls_value = json_value(value) if isinstance(value, str) else value
    if not isinstance(calls_value, list):
        problems.append(f"{RESPONSE_TOOL_CALLS} is not a JSON array")
        return []
    calls = []
    for i, item in enumerate(calls_value):
        if not isinstance(item, dict):
            problems.append(f"{RESPONSE_TOOL_CALLS}[{i}] is not a tool call")
            continue
        arguments = item.get("input", item.get("args"))
        call = tool_call(item.get("toolName"), arguments, item.get("toolCallId"))
        if call is None:
            problems.append(f"{RESPONSE_TOOL_CALLS}[{i}] has no toolName")
            continue
        calls.append(call)
    return calls


def tool_choice(value: Any) -> dict[str, str] | None:
    """`ai.prompt.toolChoice` as a provider.error's `toolChoice` {type, name?}: None for `auto`
    (nothing forced), or when it cannot be read."""
    choice = json_value(value) if isinstance(value, str) else value
    if isinstance(choice, str):
        choice = {"type": choice}
    if not isinstance(choice, dict):
        return None
    kind = text(choice.get("type"))
    if kind is None or kind == "auto" or len(kind) > 200:
        return None
    out = {"type": kind}
    name = text(choice.get("toolName"))
    if name is not None and len(name) <= 200:
        out["name"] = name
    return out


# What an AI SDK tool span records of the tool's result (with `recordOutputs`, the default), and
# what marks @ai-sdk/otel's `execute_tool` spans apart from other instrumentations'.
TOOL_RESULTS = ("ai.toolCall.result", "gen_ai.tool.call.result")
EXECUTE_TOOL_DURATION = "gen_ai.execute_tool.duration"


def listed_by_its_call(
    operation: str | None, gen_ai_operation: str | None, a: dict[str, Any]
) -> bool:
    """An AI SDK tool execution whose call the model call's response lists, wherever that model
    call is exported: the span records the tool's result, and the AI SDK records a response's
    tool calls under the same setting (`recordOutputs`). A batching exporter may send the model
    call and its tools apart; counted here too, the call would count twice."""
    if gen_ai_operation is None:
        sdk_tool = is_tool(operation)
    else:
        sdk_tool = gen_ai_operation == "execute_tool" and EXECUTE_TOOL_DURATION in a
    return sdk_tool and any(name in a for name in TOOL_RESULTS)


def tool_span_call(attributes: dict[str, Any]) -> dict[str, Any] | None:
    """An `ai.toolCall` span's execution as a toolCalls item (None without a name)."""
    return tool_call(
        attributes.get(TOOL_CALL_NAME), attributes.get(TOOL_CALL_ARGS), attributes.get(TOOL_CALL_ID)
    )


@dataclass(frozen=True, slots=True)
class KeySet:
    """What a model-call span's attribute keys hold, read once for each key set: the spans of
    one SDK repeat the same keys in the same order."""

    # The ai.telemetry.metadata.* keys, each with its name in the caller's metadata.
    metadata: tuple[tuple[str, str], ...]
    # Keys of the GenAI forms of tools and messages (genai_messages.read_tools).
    genai_tools: bool
    # The GenAI spellings of usage it holds (genai_messages.usage_keys).
    usage: genai_messages.UsageKeys
    # The ai.usage.* spellings of each token count it holds, in the order looked for.
    input_tokens: tuple[str, ...]
    output_tokens: tuple[str, ...]
    cache_read: tuple[str, ...]
    cache_write: tuple[str, ...]
    thinking: tuple[str, ...]


def _key_set_of(a: dict[str, Any]) -> KeySet:
    return KeySet(
        metadata=tuple((k, k[len(METADATA) :]) for k in a if k.startswith(METADATA)),
        genai_tools=genai_messages.reads_tools(a),
        usage=genai_messages.usage_keys_in(a),
        input_tokens=tuple(k for k in INPUT_TOKENS if k in a),
        output_tokens=tuple(k for k in OUTPUT_TOKENS if k in a),
        cache_read=tuple(k for k in CACHE_READ_TOKENS if k in a),
        cache_write=tuple(k for k in CACHE_WRITE_TOKENS if k in a),
        thinking=tuple(k for k in REASONING_TOKENS if k in a),
    )


_key_set = KeySetCache(_key_set_of)


def caller_metadata(a: dict[str, Any], keys: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """`ai.telemetry.metadata.*` (`keys`: each with its short name) as the record keeps it:
    `metadata` {key: value}, and `userId` when a key names the user; left out (its size noted)
    when large."""
    if not keys:
        return {}
    metadata = {short: a[k] for k, short in keys}
    out: dict[str, Any] = {}
    for key in USER_KEYS:
        user = text(metadata.get(key))
        if user is not None and len(user) <= 200:
            out["userId"] = user
            break
    size = sum(len(k) + len(str(v)) for k, v in metadata.items())
    if size <= MAX_METADATA_CHARS:
        out["metadata"] = metadata
    else:
        out["metadataOmitted"] = f"{size:,} characters"
    return out

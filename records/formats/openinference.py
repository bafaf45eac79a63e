"""OpenInference's attributes (the `openinference-semantic-conventions` package: SpanAttributes,
OpenInferenceSpanKindValues) as plain data.

OpenInference marks every span with `openinference.span.kind`: LLM spans are model calls (model,
provider, token counts, offered tools in `llm.tools.N.tool.json_schema`, called tools in
`llm.output_messages.N.message.tool_calls.M.tool_call.*`), TOOL spans tool executions, AGENT and
CHAIN spans the structure of a run. The other kinds (retrievers, embeddings, rerankers,
guardrails, evaluators, prompts) carry no decision: they are counted as seen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from records.formats.attributes import (
    IndexedKeys,
    count,
    json_value,
    status_in_message,
    text,
    tool_name,
)
from records.formats.llm_read import LlmRead, tool_call

SPAN_KIND = "openinference.span.kind"
LLM = "LLM"
TOOL = "TOOL"
AGENT = "AGENT"
CHAIN = "CHAIN"
STRUCTURE = frozenset({AGENT, CHAIN})
# Kinds that carry nothing a decision record holds: seen, never rejected.
SEEN_ONLY = frozenset(
    {"RETRIEVER", "EMBEDDING", "RERANKER", "GUARDRAIL", "EVALUATOR", "PROMPT", "UNKNOWN"}
)

AGENT_NAME = "agent.name"
HANDOFF_FROM = "graph.node.parent_id"  # an agent handed the run to this one (a sub-run)
SESSION_ID = "session.id"
USER_ID = "user.id"
METADATA = "metadata"
TOOL_NAME = "tool.name"
TOOL_ID = "tool.id"
INPUT_VALUE = "input.value"

MODEL_NAME = "llm.model_name"
REQUEST_MODEL = "llm.request.model_name"
RESPONSE_MODEL = "llm.response.model_name"
PROVIDER = ("llm.provider", "llm.system")
INVOCATION_PARAMETERS = "llm.invocation_parameters"
TOKENS = {
    "input_tokens": "llm.token_count.prompt",
    "output_tokens": "llm.token_count.completion",
    "cache_read": "llm.token_count.prompt_details.cache_read",
    "cache_write": "llm.token_count.prompt_details.cache_write",
    "thinking": "llm.token_count.completion_details.reasoning",
}
TOTAL_TOKENS = "llm.token_count.total"
FINISH_REASON = "llm.finish_reason"
TOOLS = "llm.tools."
INPUT_MESSAGES = "llm.input_messages."
OUTPUT_MESSAGES = "llm.output_messages."
TOOL_CALLS = "message.tool_calls."

# Metadata is copied into the record only when small: it is free-form and may be huge.
MAX_METADATA_CHARS = 4096


def kind_of(attributes: dict[str, Any]) -> str | None:
    value = attributes.get(SPAN_KIND)
    return value.upper() if isinstance(value, str) and value else None


@dataclass(slots=True)
class ExportReading:
    """What the LLM spans of one export repeat, read once: an agent offers the same tools on
    every call, so its spans carry the same attribute keys and the same tool schemas."""

    keys: IndexedKeys = field(
        default_factory=lambda: IndexedKeys((TOOLS, INPUT_MESSAGES, OUTPUT_MESSAGES))
    )
    tool_call_keys: IndexedKeys = field(default_factory=lambda: IndexedKeys((TOOL_CALLS,)))
    # The name tool_name reads from each schema text.
    tool_names: dict[str, str | None] = field(default_factory=dict)


def read_llm(
    attributes: dict[str, Any], exception: dict[str, Any], export: ExportReading | None = None
) -> LlmRead:
    """An LLM span's model call, tools and failure. `exception`: the attributes of its first
    `exception` event ({} when none). `export`: what this export's other LLM spans read."""
    a = attributes
    out = LlmRead("openinference")
    out.provider = text(a.get(PROVIDER[0])) or text(a.get(PROVIDER[1]))
    parameters = json_value(a.get(INVOCATION_PARAMETERS))
    requested = parameters.get("model") if isinstance(parameters, dict) else None
    out.request_model = text(a.get(REQUEST_MODEL)) or text(requested)
    # llm.model_name is the model the response names when the instrumentation saw one (the
    # openai instrumentation), else the configured one: without a request model beside it, it
    # is the call's model and no swap can be judged.
    out.response_model = text(a.get(RESPONSE_MODEL)) or text(a.get(MODEL_NAME))
    for name, attribute in TOKENS.items():
        setattr(out, name, count(a.get(attribute)))
    total = count(a.get(TOTAL_TOKENS))
    if out.output_tokens is None and total is not None and out.input_tokens is not None:
        out.output_tokens = max(total - out.input_tokens, 0)
    reason = text(a.get(FINISH_REASON))
    out.finish_reasons = [reason] if reason else []
    export = export or ExportReading()
    tools, inputs, outputs = export.keys.lists(a)
    out.offered = _offered(tools, out.problems, export.tool_names)
    out.called = _called(outputs, out.problems, export.tool_call_keys)
    out.messages_count = len(inputs) if inputs else None
    out.error_type = _short_type(text(exception.get("exception.type")))
    out.error_message = text(exception.get("exception.message"))
    status = count(a.get("http.response.status_code"))
    out.status = status if status is not None else status_in_message(out.error_message)
    if out.provider is None:
        out.missing.append("llm.provider (or llm.system)")
    if out.request_model is None and out.response_model is None:
        out.missing.append(MODEL_NAME)
    user = text(a.get(USER_ID))
    if user:
        out.extra["userId"] = user
    metadata = a.get(METADATA)
    if isinstance(metadata, str) and metadata:
        parsed = json_value(metadata) if len(metadata) <= MAX_METADATA_CHARS else None
        if parsed is not None:
            out.extra["metadata"] = parsed
        else:
            out.extra["metadataOmitted"] = f"{len(metadata):,} characters"
    return out


def _short_type(name: str | None) -> str | None:
    """`openai.InternalServerError` → `InternalServerError`, as error.type spells it."""
    return name.rsplit(".", 1)[-1] or name if name else None


def _offered(
    tools: list[tuple[int, dict[str, Any]]], problems: list[str], names: dict[str, str | None]
) -> list[str] | None:
    if not tools:
        return None
    offered = []
    for i, fields in tools:
        name = text(fields.get("tool.name"))
        if name is None:
            schema = fields.get("tool.json_schema")
            if isinstance(schema, str):
                if schema in names:
                    name = names[schema]
                else:
                    name = names[schema] = tool_name(schema)
            else:
                name = tool_name(schema)
            if name is None:
                why = "is not JSON" if json_value(schema) is None else "names no tool"
                problems.append(f"{TOOLS}{i}.tool.json_schema {why}")
                continue
        offered.append(name)
    return offered


def _called(
    outputs: list[tuple[int, dict[str, Any]]], problems: list[str], keys: IndexedKeys
) -> list[dict[str, Any]]:
    calls = []
    for m, message in outputs:
        for c, fields in keys.lists(message)[0]:
            call = tool_call(
                fields.get("tool_call.function.name"),
                fields.get("tool_call.function.arguments"),
                fields.get("tool_call.id"),
            )
            if call is None:
                problems.append(
                    f"{OUTPUT_MESSAGES}{m}.{TOOL_CALLS}{c} has no tool_call.function.name"
                )
                continue
            calls.append(call)
    return calls


def tool_span_call(attributes: dict[str, Any]) -> dict[str, Any] | None:
    """A TOOL span's execution as a toolCalls item (None without tool.name: a handoff)."""
    return tool_call(
        attributes.get(TOOL_NAME), attributes.get(INPUT_VALUE), attributes.get(TOOL_ID)
    )

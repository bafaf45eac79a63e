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
GRAPH_NODE = "graph.node.id"  # on an AGENT span (OpenAI Agents JS): the agent's name
HANDOFF_FROM = "graph.node.parent_id"  # an agent handed the run to this one (a sub-run)
SESSION_ID = "session.id"
USER_ID = "user.id"
METADATA = "metadata"
TOOL_NAME = "tool.name"
TOOL_ID = "tool.id"
INPUT_VALUE = "input.value"
OUTPUT_VALUE = "output.value"
# LangChain's metadata: the provider of a chat model, and the integration a CHAIN span is of.
LS_PROVIDER = "ls_provider"
LANGGRAPH = "langgraph"
# The name LangGraph gives a graph that was not named: it names no agent.
UNNAMED_GRAPH = "LangGraph"
# output.value is read for the answering model and the tool call ids only up to this size.
MAX_OUTPUT_CHARS = 262_144

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
    metadata = a.get(METADATA)
    parsed_metadata = (
        json_value(metadata)
        if isinstance(metadata, str) and 0 < len(metadata) <= MAX_METADATA_CHARS
        else None
    )
    ls_provider = parsed_metadata.get(LS_PROVIDER) if isinstance(parsed_metadata, dict) else None
    out.provider = text(a.get(PROVIDER[0])) or text(a.get(PROVIDER[1])) or text(ls_provider)
    parameters = json_value(a.get(INVOCATION_PARAMETERS))
    requested = parameters.get("model") if isinstance(parameters, dict) else None
    out.request_model = text(a.get(REQUEST_MODEL)) or text(requested)
    answer = _answer(a.get(OUTPUT_VALUE))
    # llm.model_name is the model the response names when the instrumentation saw one (the
    # openai instrumentation), else the configured one (LangChain's): the model the output
    # names comes first. Without a request model beside it, it is the call's model and no swap
    # can be judged.
    out.response_model = text(a.get(RESPONSE_MODEL)) or answer.model or text(a.get(MODEL_NAME))
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
    _fill_call_ids(out.called, answer.call_ids)
    out.response_id = answer.response_id
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
    if isinstance(metadata, str) and metadata:
        if parsed_metadata is not None:
            out.extra["metadata"] = parsed_metadata
        else:
            out.extra["metadataOmitted"] = f"{len(metadata):,} characters"
    return out


@dataclass(slots=True)
class Answer:
    """What an LLM span's output.value says beyond the flattened attributes: the model that
    answered, the response's id and the ids of the tool calls, in order (LangChain's
    `generations`, the chat completion the openai instrumentation and the OpenAI Agents SDKs
    put there)."""

    model: str | None = None
    response_id: str | None = None
    call_ids: list[tuple[str, str]] = field(default_factory=list)  # (name, id)


def _answer(value: Any) -> Answer:
    out = Answer()
    if not isinstance(value, str) or not value or len(value) > MAX_OUTPUT_CHARS:
        return out
    if value[0] not in "[{":
        return out
    parsed = json_value(value)
    messages: list[dict[str, Any]] = []
    if isinstance(parsed, dict) and isinstance(parsed.get("generations"), list):
        for batch in parsed["generations"]:
            for generation in batch if isinstance(batch, list) else ():
                message = generation.get("message") if isinstance(generation, dict) else None
                kwargs = message.get("kwargs") if isinstance(message, dict) else None
                if isinstance(kwargs, dict):
                    messages.append(kwargs)
        for message in messages:
            if out.response_id is None:
                out.response_id = text(message.get("id"))
            metadata = message.get("response_metadata")
            if isinstance(metadata, dict) and out.model is None:
                out.model = text(metadata.get("model_name")) or text(metadata.get("model"))
            for call in message.get("tool_calls") or ():
                if isinstance(call, dict) and text(call.get("id")) and text(call.get("name")):
                    out.call_ids.append((call["name"], call["id"]))
    elif isinstance(parsed, list) or (isinstance(parsed, dict) and "choices" in parsed):
        for completion in parsed if isinstance(parsed, list) else [parsed]:
            if not isinstance(completion, dict):
                continue
            if out.model is None:
                out.model = text(completion.get("model"))
            if out.response_id is None:
                out.response_id = text(completion.get("id"))
            for choice in completion.get("choices") or ():
                message = choice.get("message") if isinstance(choice, dict) else None
                for call in (message or {}).get("tool_calls") or ():
                    function = call.get("function") if isinstance(call, dict) else None
                    name = text(function.get("name")) if isinstance(function, dict) else None
                    if name and text(call.get("id")):
                        out.call_ids.append((name, call["id"]))
    return out


def _fill_call_ids(called: list[dict[str, Any]], ids: list[tuple[str, str]]) -> None:
    """The ids the output names, given to the called tools that lack one, in order."""
    if not ids or all("id" in c for c in called):
        return
    remaining = list(ids)
    for call in called:
        if "id" in call:
            continue
        for i, (name, call_id) in enumerate(remaining):
            if name == call["name"]:
                call["id"] = call_id
                del remaining[i]
                break


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
    """A TOOL span's execution as a toolCalls item; None for a handoff (the Agents SDKs': no
    tool.name in Python, `handoff_to_<agent>` from `{"from_agent"}` in JS)."""
    name = attributes.get(TOOL_NAME)
    arguments = attributes.get(INPUT_VALUE)
    if isinstance(name, str) and name.startswith("handoff_to_"):
        parsed = json_value(arguments) if isinstance(arguments, str) else None
        if isinstance(parsed, dict) and "from_agent" in parsed:
            return None
    return tool_call(name, arguments, attributes.get(TOOL_ID) or tool_span_call_id(attributes))


def tool_span_call_id(attributes: dict[str, Any]) -> str | None:
    """The id of the call a TOOL span executes: tool.id, else the `tool_call_id` of the
    ToolMessage LangChain puts in output.value (its input.value holds the arguments alone)."""
    own = text(attributes.get(TOOL_ID))
    if own:
        return own
    value = attributes.get(OUTPUT_VALUE)
    if not isinstance(value, str) or "tool_call_id" not in value or len(value) > MAX_OUTPUT_CHARS:
        return None
    parsed = json_value(value)
    message = parsed.get("output", parsed) if isinstance(parsed, dict) else None
    kwargs = message.get("kwargs") if isinstance(message, dict) else None
    return text(kwargs.get("tool_call_id")) if isinstance(kwargs, dict) else None


def structure_agent(kind: str | None, name: str, attributes: dict[str, Any]) -> str | None:
    """The agent a structure span names: an AGENT span's graph.node.id (OpenAI Agents JS), or
    a LangGraph graph's name (its CHAIN span: LangChain metadata of the langgraph integration
    without a langgraph_node, which marks the graph's nodes)."""
    if kind == AGENT:
        return text(attributes.get(GRAPH_NODE))
    if kind != CHAIN:
        return None
    metadata = attributes.get(METADATA)
    if not isinstance(metadata, str) or LANGGRAPH not in metadata:
        return None
    if len(metadata) > MAX_METADATA_CHARS:
        return None
    parsed = json_value(metadata)
    if not isinstance(parsed, dict) or parsed.get("ls_integration") != LANGGRAPH:
        return None
    if "langgraph_node" in parsed or name == UNNAMED_GRAPH:
        return None
    return name or None

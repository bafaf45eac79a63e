"""The OpenTelemetry GenAI conventions' model-call attributes as plain data, with the older forms
still in use: messages as span events (`gen_ai.choice`, `gen_ai.<role>.message`) and
OpenLLMetry's indexed attributes (`gen_ai.prompt.N.*`, `gen_ai.completion.N.*`,
`llm.request.functions.N.*`).

Offered tools: `gen_ai.tool.definitions` (a JSON array, or an OTLP array of kvlists), else
`llm.request.functions.N.name`. Called tools: the `tool_call` parts of `gen_ai.output.messages`,
else `gen_ai.completion.N.tool_calls.M.*`, else the tool calls of `gen_ai.choice` events.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any, NamedTuple

from records.formats.attributes import (
    IndexedKeys,
    KeySetCache,
    count,
    indexed,
    json_value,
    status_in_message,
    text,
    tool_names,
)
from records.formats.llm_read import LlmRead, tool_call

OPERATION = "gen_ai.operation.name"
PROVIDER = ("gen_ai.provider.name", "gen_ai.system")
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
OUTPUT_TOKENS = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")
CACHE_READ_TOKENS = ("gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cache_read_input_tokens")
CACHE_WRITE_TOKENS = (
    "gen_ai.usage.cache_creation.input_tokens",
    "gen_ai.usage.cache_write.input_tokens",
    "gen_ai.usage.cache_creation_input_tokens",
)
REASONING_TOKENS = "gen_ai.usage.reasoning.output_tokens"
TOOL_DEFINITIONS = "gen_ai.tool.definitions"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
ERROR_TYPE = "error.type"
HTTP_STATUS = "http.response.status_code"
# OpenLLMetry
REQUEST_TYPE = "llm.request.type"
PROMPTS = "gen_ai.prompt."
COMPLETIONS = "gen_ai.completion."
FUNCTIONS = "llm.request.functions."
# OpenLLMetry's indexed lists, read in one pass over a span's attributes; the keys' places are
# remembered across spans (an agent sends the same keys on every call).
_OPENLLMETRY_LISTS = IndexedKeys((FUNCTIONS, COMPLETIONS, PROMPTS))
# What read_tools reads besides the OpenLLMetry lists.
_TOOLS_AND_MESSAGES = frozenset({TOOL_DEFINITIONS, OUTPUT_MESSAGES, INPUT_MESSAGES})
# Span events of the older message form.
CHOICE_EVENT = "gen_ai.choice"
MESSAGE_EVENTS = frozenset(
    {"gen_ai.system.message", "gen_ai.user.message", "gen_ai.assistant.message",
     "gen_ai.tool.message"}
)  # fmt: skip

INFERENCE = frozenset({"chat", "text_completion", "generate_content"})
# OpenLLMetry's llm.request.type on spans that carry no gen_ai.operation.name.
OPENLLMETRY_INFERENCE = frozenset({"chat", "completion"})


class UsageKeys(NamedTuple):
    """For each usage attribute spelled more than one way, the first spelling a key set holds
    (None: none); read once per key set (usage_keys)."""

    provider: str | None
    input_tokens: str | None
    output_tokens: str | None
    cache_read: str | None
    cache_write: str | None


def usage_keys_in(keys: Collection[str]) -> UsageKeys:
    def first(names: tuple[str, ...]) -> str | None:
        return next((name for name in names if name in keys), None)

    return UsageKeys(
        first(PROVIDER),
        first(INPUT_TOKENS),
        first(OUTPUT_TOKENS),
        first(CACHE_READ_TOKENS),
        first(CACHE_WRITE_TOKENS),
    )


usage_keys = KeySetCache(usage_keys_in)


def is_inference(operation: str | None, attributes: dict[str, Any]) -> bool:
    if operation is not None:
        return operation in INFERENCE
    return attributes.get(REQUEST_TYPE) in OPENLLMETRY_INFERENCE


def read_llm(
    attributes: dict[str, Any], events: list[tuple[str, dict[str, Any]]], status_message: str
) -> LlmRead:
    """A GenAI inference span's model call, tools and failure; `events` as (name, attributes)
    of its span events."""
    a = attributes
    out = LlmRead("gen_ai" if OPERATION in a else "openllmetry")
    read_usage(a, out)
    read_tools(a, events, out)
    read_failure(a, events, status_message, out)
    if out.provider is None:
        out.missing.append("gen_ai.provider.name")
    if out.request_model is None and out.response_model is None:
        out.missing.append(REQUEST_MODEL)
    return out


def read_usage(a: dict[str, Any], out: LlmRead, keys: UsageKeys | None = None) -> None:
    """Provider, models, token counts and finish reasons. `keys`: usage_keys(a), when the
    caller has it."""
    provider, input_tokens, output_tokens, cache_read, cache_write = keys or usage_keys(a)
    out.provider = text(a[provider]) if provider else None
    out.request_model = text(a.get(REQUEST_MODEL))
    out.response_model = text(a.get(RESPONSE_MODEL))
    out.input_tokens = count(a[input_tokens]) if input_tokens else None
    out.output_tokens = count(a[output_tokens]) if output_tokens else None
    out.cache_read = count(a[cache_read]) if cache_read else None
    out.cache_write = count(a[cache_write]) if cache_write else None
    out.thinking = count(a.get(REASONING_TOKENS))
    reasons = a.get(FINISH_REASONS)
    if isinstance(reasons, str):
        out.finish_reasons = [reasons]
    elif isinstance(reasons, list):
        out.finish_reasons = [r for r in reasons if isinstance(r, str)]


def read_tools(a: dict[str, Any], events: list[tuple[str, dict[str, Any]]], out: LlmRead) -> None:
    """Offered and called tools and the messages count, in any of the forms the module names;
    a finish reason the messages name when the span named none."""
    if TOOL_DEFINITIONS in a and OUTPUT_MESSAGES in a and INPUT_MESSAGES in a:
        functions = completions = prompts = []
    else:
        functions, completions, prompts = _OPENLLMETRY_LISTS.lists(a)
    out.offered = _offered(a, functions, out.problems)
    out.called, finish = _called(a, completions, events, out.problems)
    if not out.finish_reasons and finish:
        out.finish_reasons = [finish]
    out.messages_count = _messages_count(a, prompts, events)


def reads_tools(keys: Iterable[str]) -> bool:
    """Whether read_tools could find anything in attributes with these keys, span events
    aside."""
    prefixes = _OPENLLMETRY_LISTS.prefixes
    return any(key in _TOOLS_AND_MESSAGES or key.startswith(prefixes) for key in keys)


def read_failure(
    a: dict[str, Any], events: list[tuple[str, dict[str, Any]]], status_message: str, out: LlmRead
) -> None:
    """The error type, message and HTTP status, from the attributes, the exception event and
    the span's status message."""
    out.error_type = text(a.get(ERROR_TYPE))
    exception = next((attrs for name, attrs in events if name == "exception"), {})
    if out.error_type is None:
        out.error_type = text(exception.get("exception.type"))
    out.error_message = status_message or text(exception.get("exception.message"))
    status = count(a.get(HTTP_STATUS))
    if status is None or not 100 <= status <= 599:
        status = status_in_message(out.error_message)
    out.status = status


def _offered(a: dict[str, Any], functions: list, problems: list[str]) -> list[str] | None:
    if TOOL_DEFINITIONS in a:
        definitions = json_value(a[TOOL_DEFINITIONS])
        if not isinstance(definitions, list):
            problems.append(f"{TOOL_DEFINITIONS} is not a JSON array")
            return None
        return tool_names(definitions, TOOL_DEFINITIONS, problems)
    if functions:
        names = []
        for i, fields in functions:
            name = text(fields.get("name"))
            if name is None:
                problems.append(f"{FUNCTIONS}{i} has no name")
                continue
            names.append(name)
        return names
    return None


def _called(
    a: dict[str, Any],
    completions: list,
    events: list[tuple[str, dict[str, Any]]],
    problems: list[str],
) -> tuple[list[dict[str, Any]], str | None]:
    """The response's tool calls, and a finish reason the messages name."""
    if OUTPUT_MESSAGES in a:
        messages = json_value(a[OUTPUT_MESSAGES])
        if not isinstance(messages, list):
            problems.append(f"{OUTPUT_MESSAGES} is not a JSON array")
            return [], None
        calls, finish = [], None
        for m, message in enumerate(messages):
            if not isinstance(message, dict):
                continue
            finish = finish or text(message.get("finish_reason"))
            for p, part in enumerate(message.get("parts") or ()):
                if not isinstance(part, dict) or part.get("type") != "tool_call":
                    continue
                call = tool_call(part.get("name"), part.get("arguments"), part.get("id"))
                if call is None:
                    problems.append(f"{OUTPUT_MESSAGES}[{m}].parts[{p}]: a tool_call without name")
                    continue
                calls.append(call)
        return calls, finish
    if completions:
        calls, finish = [], None
        for n, fields in completions:
            finish = finish or text(fields.get("finish_reason"))
            for m, call_fields in indexed(fields, "tool_calls."):
                call = tool_call(
                    call_fields.get("name"), call_fields.get("arguments"), call_fields.get("id")
                )
                if call is None:
                    problems.append(f"{COMPLETIONS}{n}.tool_calls.{m} has no name")
                    continue
                calls.append(call)
        return calls, finish
    calls, finish = [], None
    for name, attrs in events:
        if name != CHOICE_EVENT:
            continue
        finish = finish or text(attrs.get("finish_reason"))
        message = json_value(attrs.get("message")) or {}
        raw_calls = json_value(attrs.get("tool_calls"))
        if raw_calls is None and isinstance(message, dict):
            raw_calls = message.get("tool_calls")
        for item in raw_calls if isinstance(raw_calls, list) else ():
            item = json_value(item) if isinstance(item, str) else item
            if not isinstance(item, dict):
                continue
            function = item.get("function") if isinstance(item.get("function"), dict) else item
            call = tool_call(function.get("name"), function.get("arguments"), item.get("id"))
            if call is None:
                problems.append(f"a {CHOICE_EVENT} event's tool call without name")
                continue
            calls.append(call)
    return calls, finish


def _messages_count(
    a: dict[str, Any], prompts: list, events: list[tuple[str, dict[str, Any]]]
) -> int | None:
    if INPUT_MESSAGES in a:
        messages = json_value(a[INPUT_MESSAGES])
        return len(messages) if isinstance(messages, list) else None
    if prompts:
        return len(prompts)
    in_events = sum(1 for name, _ in events if name in MESSAGE_EVENTS)
    return in_events or None

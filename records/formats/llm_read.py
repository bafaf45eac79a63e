"""What a model-call span says, whichever convention spelled it (records.formats.genai_messages,
records.formats.openinference): the one shape records.formats.otlp_mapping builds records
from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from records.formats.attributes import json_value

# A tool call's arguments longer than this are left out of the record (their size is noted):
# a record's data has a size limit, and one huge argument must not cost the whole decision.
MAX_ARGUMENTS_CHARS = 16_384


@dataclass(slots=True)
class LlmRead:
    convention: str  # "gen_ai", "openllmetry", "openinference" or "ai_sdk"
    provider: str | None = None
    request_model: str | None = None
    response_model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read: int | None = None
    cache_write: int | None = None
    thinking: int | None = None
    finish_reasons: list[str] = field(default_factory=list)
    # Tool names the request offered, in order; None when the span does not say.
    offered: list[str] | None = None
    called: list[dict[str, Any]] = field(default_factory=list)
    messages_count: int | None = None
    response_id: str | None = None  # the response's id, when the span names it
    error_type: str | None = None
    error_message: str | None = None
    status: int | None = None
    # The tool choice the request forced ({type, name?}); None when it forced none or not said.
    tool_choice: dict[str, str] | None = None
    # The model the agent was configured with (its agent span says), when it names one: a step
    # on another model is a swap.
    configured_model: str | None = None
    # Attributes the convention requires that the span lacks (stored anyway, flagged).
    missing: list[str] = field(default_factory=list)
    # What could not be read (a tool schema that is not JSON, a tool call without a name).
    problems: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # kept in data.otel


def tool_call(name: Any, arguments: Any = None, call_id: Any = None) -> dict[str, Any] | None:
    """One called tool as a turn's toolCalls item; None without a name."""
    if not isinstance(name, str) or not name:
        return None
    call: dict[str, Any] = {"name": name}
    if isinstance(arguments, str) and len(arguments) > MAX_ARGUMENTS_CHARS:
        call["argumentsOmitted"] = f"{len(arguments):,} characters"
    elif arguments is not None and arguments != "":
        parsed = json_value(arguments) if isinstance(arguments, str) else arguments
        call["arguments"] = arguments if parsed is None else parsed
    if isinstance(call_id, str) and call_id:
        call["id"] = call_id
    return call

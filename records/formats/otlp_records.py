"""What the mapping of one OTLP export collects: raw records (record envelopes), each with the
span it came from, the model calls waiting for the rest of their run, and the spans rejected
with why. Plain data; records.formats.otlp_mapping fills it, records.formats.otlp judges it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from records.formats import trace_decisions
from records.formats.llm_read import LlmRead
from records.formats.openinference import ExportReading
from records.formats.otlp_spans import EventView, Scope, SpanView

# One problem's text in a rejection, at most (records.formats.otlp shows the first few).
MAX_PROBLEM_CHARS = 400


@dataclass(slots=True)
class PendingCall:
    """A model-call span read, waiting for its run's other calls (its iteration, a fallback)."""

    span: SpanView
    read: LlmRead
    call: trace_decisions.Call


@dataclass(slots=True)
class Mapped:
    """One raw record (the record envelope) and the span (or span event) it came from."""

    span: SpanView
    raw: dict[str, Any]
    note: str = ""  # what else to name in a rejection besides the span: "(turn)"
    event: EventView | None = None

    @property
    def detail(self) -> str:
        """The record's source within its span, for a rejection ("" for the span itself)."""
        if self.event is not None:
            return f"event {self.event.name}[{self.event.index}]"
        return self.note


@dataclass
class Mapping:
    spans: list[SpanView]
    # Some value may hold a NUL or a non-finite number: normalise must scrub (see AttributeReader).
    scrub: bool = True
    records: list[Mapped] = field(default_factory=list)
    # Model-call spans, mapped once the export's calls of each run are all known.
    calls: list[PendingCall] = field(default_factory=list)
    # The turn of each model call's tool decision, by (trace id, span id).
    decision_turns: dict[tuple[str, str], Mapped] = field(default_factory=dict)
    # Spans read as context only (agent, chain, retriever, ... spans), by what they are.
    seen: dict[str, int] = field(default_factory=dict)
    # What the export's OpenInference LLM spans repeat, read once.
    openinference: ExportReading = field(default_factory=ExportReading)
    # Problems by span: a span with any is counted once in rejected_spans.
    problems: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    def reject(self, span: SpanView, message: str) -> None:
        # A span without ids is a problem of its own, however many share the missing ids.
        key = (span.trace_id, span.span_id) if span.identified else ("", str(id(span)))
        if len(message) > MAX_PROBLEM_CHARS:  # a value may be named in it: keep the answer small
            message = message[:MAX_PROBLEM_CHARS] + "…"
        self.problems.setdefault(key, []).append(f"{span.label}: {message}")


def envelope(kind: str, record_id: str, scope: Scope, at: datetime, data: dict) -> dict[str, Any]:
    raw: dict[str, Any] = {"id": record_id, "kind": kind, "ts": at}
    put_scope(raw, scope)
    raw["data"] = data
    return raw


def put_scope(raw: dict[str, Any], scope: Scope) -> None:
    """The scope's run and what else it names into a raw record's envelope."""
    run_id, parent_run_id, agent, session_id, release = scope
    raw["run_id"] = run_id
    if session_id is not None:
        raw["session_id"] = session_id
    if agent is not None:
        raw["agent"] = agent
    if parent_run_id is not None:
        raw["parent_run_id"] = parent_run_id
    if release is not None:
        raw["release"] = release


def otel_ref(span: SpanView, **extra: Any) -> dict[str, Any]:
    """Where a record came from, kept inside `data` (unknown fields are kept as posted)."""
    ref = {"traceId": span.trace_id, "spanId": span.span_id, "span": span.name}
    for key, value in extra.items():
        if value is not None:
            ref[key] = value
    return ref

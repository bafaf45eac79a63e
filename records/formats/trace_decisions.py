"""The decisions read from plain traces: one place for each rule (docs/architecture.md,
"Derived fields").

A plain trace (OpenTelemetry GenAI, OpenLLMetry, OpenInference) tells what one model call was
offered, what it called, which model was asked for and which answered, and whether it failed. It
does not tell what a classifier ranked, served or narrowed: those stages are *not reported*
(None), never zero. Pure functions over plain data; records.formats.otlp_mapping calls them once
all the spans of an export are read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# What a plain trace cannot tell about a tool decision, and so never counts.
NOT_REPORTED_STAGES = ("ranked", "served", "narrowed", "classifier")


@dataclass(slots=True)
class Call:
    """One model call of a run, as a trace reports it (any convention)."""

    span_key: tuple[str, str]  # (trace id, span id)
    run_id: str
    start_ns: int
    request_model: str | None
    response_model: str | None
    provider: str | None
    failed: bool
    error: str | None = None  # the cause of a failure: error type, status, message
    status: int | None = None
    # Tool names the request offered, in order; None when the trace does not say (not "none").
    offered: list[str] | None = None
    # Tool calls of the response: [{"name", "arguments"?, "id"?}].
    called: list[dict[str, Any]] = field(default_factory=list)
    explicit_iteration: int | None = None  # decisionboard.iteration on the span

    @property
    def model(self) -> str | None:
        """The model that answered, else the one asked for."""
        return self.response_model or self.request_model


# --- the iteration ----------------------------------------------------------------------------
def iterations(calls: Sequence[Call]) -> dict[tuple[str, str], int]:
    """Each call's iteration, unless the span names its own (decisionboard.iteration): the
    steps of its run in this export, counted from 0 in start order (ordered_runs), where a call
    that follows a failed call retries that call's step (retries_step) and so keeps its
    iteration. Calls [fails on model A, answers on model B, answers on model B] are the
    iterations [0, 0, 1]: the fallback answers the step the failure left, the next call is the
    next step.

    Only the calls of one export are seen: a run whose calls come in several exports numbers
    each export's calls from 0 again, and a later export that brings an earlier call does not
    renumber the calls already stored (records are immutable once acknowledged).
    """
    out: dict[tuple[str, str], int] = {}
    for run_calls in ordered_runs(calls):
        step = -1
        previous: Call | None = None
        for call in run_calls:
            if previous is None or not retries_step(previous):
                step += 1
            explicit = call.explicit_iteration
            out[call.span_key] = explicit if explicit is not None else step
            previous = call
    return out


def retries_step(previous: Call) -> bool:
    """The next call of the run after `previous` tries `previous`'s step again: `previous`
    failed, and whichever model is asked next (the same: a retry; another: a fallback, as
    fallbacks tells them apart) answers that step. A call after an answer is the next step."""
    return previous.failed


def ordered_runs(calls: Sequence[Call]) -> list[list[Call]]:
    """The calls of each run, in start order (span id breaking ties)."""
    by_run: dict[str, list[Call]] = {}
    for call in calls:
        by_run.setdefault(call.run_id, []).append(call)
    return [sorted(c, key=lambda c: (c.start_ns, c.span_key[1])) for c in by_run.values()]


# --- the tool decision ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ToolDecision:
    offered: list[str] | None  # None: not reported by the trace
    called: list[str]
    invented: list[str]  # called, not offered (empty when offered is not reported)


def tool_decision(call: Call) -> ToolDecision | None:
    """A call that offered tools, or called any, is a tool decision: offered → called. A called
    name not among the offered tools is *invented*; when the trace does not report what was
    offered, nothing is judged invented."""
    called = [c["name"] for c in call.called]
    if not call.offered and not called:
        return None
    offered_set = set(call.offered or ())
    invented = [n for n in dict.fromkeys(called) if n not in offered_set] if call.offered else []
    return ToolDecision(call.offered, called, invented)


# --- the swap ---------------------------------------------------------------------------------
# A dated snapshot: the model's name and a date, as providers name pinned versions
# (gpt-4o-mini-2024-07-18, claude-3-5-sonnet-20241022, gemini-1.5-pro@20240514 and -001 style
# revision numbers are not dates and so not snapshots).
_SNAPSHOT = re.compile(r"^(?P<base>.+?)(?:-\d{4}-\d{2}-\d{2}|-\d{8}|@\d{8})$")


def base_model(name: str) -> str:
    """The name without a trailing snapshot date."""
    match = _SNAPSHOT.match(name)
    return match.group("base") if match else name


def is_swap(request_model: str | None, response_model: str | None) -> bool:
    """The response came from another model than the request asked for. Both must be known;
    a dated snapshot of the requested model (or the alias of a requested snapshot) is the same
    model: names are compared after removing one trailing date (-YYYY-MM-DD, -YYYYMMDD or
    @YYYYMMDD), exactly and case-sensitively otherwise."""
    if not request_model or not response_model or request_model == response_model:
        return False
    return base_model(request_model) != base_model(response_model)


# --- the fallback -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Fallback:
    failed: Call
    next: Call
    cause: str


def fallbacks(run_calls: Sequence[Call]) -> list[Fallback]:
    """A failed call followed (the next call of the same run, in start order) by a call to
    another model is a fallback from the failed model to that one; its cause is the failure's
    error. A failed call followed by the same model is a retry, not a fallback. Either way the
    following call retries the failed call's step and shares its iteration (retries_step)."""
    out = []
    for failed, following in zip(run_calls, run_calls[1:], strict=False):
        if not retries_step(failed):
            continue
        before, after = (
            failed.request_model or failed.model,
            following.request_model or following.model,
        )
        if before and after and base_model(before) != base_model(after):
            out.append(Fallback(failed, following, failure_cause(failed)))
    return out


def failure_cause(call: Call) -> str:
    """What made a call fail, as the span tells it: error type and HTTP status."""
    parts = [p for p in (call.error, f"HTTP {call.status}" if call.status else None) if p]
    return " ".join(parts) or "error"


def error_kind(status: int | None, error: str | None) -> str:
    """agentfootprint's errorKind of a failure."""
    lowered = (error or "").lower()
    if status == 429 or "ratelimit" in lowered or "rate_limit" in lowered:
        return "rate-limit"
    if status is not None and 500 <= status <= 599:
        return "5xx-transient"
    if any(word in lowered for word in ("internalserver", "unavailable", "overload", "timeout")):
        return "5xx-transient"
    return "unknown"

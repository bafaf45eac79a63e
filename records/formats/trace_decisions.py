"""The decisions read from plain traces: one place for each rule (docs/architecture.md,
"Derived fields").

A plain trace (OpenTelemetry GenAI, OpenLLMetry, OpenInference) tells what one model call was
offered, what it called, which model was asked for and which answered, and whether it failed. It
does not tell what a classifier ranked, served or narrowed: those stages are *not reported*
(None), never zero. Pure functions over plain data; records.formats.otlp_mapping calls them once
all the spans of an export are read.
"""

from __future__ import annotations

import bisect
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
    end_ns: int = 0
    # The failure's one verdict (error_verdict), read by provider.error and reliability alike.
    verdict: ErrorVerdict | None = None

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
def is_tool_decision(call: Call) -> bool:
    """A call that offered tools, or called any, is a tool decision: offered → called. Which
    called names are invented (not among those offered) is judged at ingest from the turn's
    toolNameMap (records.contract.derive); when the trace does not report what was offered, the
    turn has none and nothing is judged invented."""
    return bool(call.offered or call.called)


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
    if status == 429 or any(word in lowered for word in _RATE_LIMIT_WORDS):
        return "rate-limit"
    if status is not None and 500 <= status <= 599:
        return "5xx-transient"
    if any(word in lowered for word in _TRANSIENT_WORDS):
        return "5xx-transient"
    return "unknown"


_RATE_LIMIT_WORDS = ("ratelimit", "rate_limit", "rate limit", "too many requests")
_TRANSIENT_WORDS = ("internalserver", "unavailable", "overload", "timeout", "timed out")
# Statuses after which the same request may succeed, though they are not server failures.
_RETRYABLE_CLIENT_STATUSES = frozenset({408, 409, 425})
_CONNECTION_WORDS = ("connection", "connect", "econnreset", "econnrefused")
# An error message that opens with its HTTP status, as the openai clients write them
# ("503 gpt-4o is overloaded"), or names it ("Error code: 503", "status 503").
_LEADING_STATUS = re.compile(r"^\s*([1-5]\d\d)\b(?!\.\d)")
_NAMED_STATUS = re.compile(r"\b(?:Error code|status(?: code)?)[: =]+([1-5]\d\d)\b", re.I)


@dataclass(frozen=True, slots=True)
class ErrorVerdict:
    """A failed call judged once: what `provider.error` stores and what a `reliability`
    fallback says of the same failure."""

    error: str  # the error type when the span names one, else the kind ("5xx-transient")
    status: int | None
    kind: str  # agentfootprint's errorKind
    retryable: bool


def error_verdict(
    error_type: str | None,
    status: int | None,
    message: str | None,
    retryable: bool | None = None,
) -> ErrorVerdict:
    """The verdict on a failure from what the span says: its error type, its HTTP status (or
    the status its message opens with or names), its message's words; `retryable` when the
    span says it (decisionboard.retryable). A rate limit or a transient server failure is
    retryable, and so are a timeout, a conflict and a lost connection."""
    if status is None and message:
        found = _LEADING_STATUS.match(message) or _NAMED_STATUS.search(message)
        status = int(found.group(1)) if found else None
    words = " ".join(p for p in (error_type, message) if p)
    kind = error_kind(status, words)
    if retryable is None:
        lowered = words.lower()
        retryable = (
            kind != "unknown"
            or status in _RETRYABLE_CLIENT_STATUSES
            or any(w in lowered for w in _CONNECTION_WORDS)
        )
    name = error_type or (kind if kind != "unknown" else None) or "error"
    return ErrorVerdict(name, status, kind, retryable)


# --- which model call asked for each tool ---------------------------------------------------
@dataclass(slots=True)  # made for every call and tool span: not frozen, which costs more
class ToolRun:
    """One execution of a tool, as a trace reports it."""

    span_key: tuple[str, str]
    run_id: str
    start_ns: int
    name: str
    call_id: str | None  # the id of the tool call it executes, when the span names it


@dataclass(slots=True)  # made for every call and tool span: not frozen, which costs more
class Attribution:
    call: tuple[str, str] | None  # the model call that asked for it; None: not in this export
    # The index in that call's `called` the execution is of (counted once, with that call);
    # None: the call did not list it, so the turn gains it.
    index: int | None


# By the clocks, a tool may seem to start up to this much before the response that asked for it
# ended: SDKs (the AI SDK among them) stamp spans in whole milliseconds.
CLOCK_SLACK_NS = 999_999


def attribute_tools(calls: Sequence[Call], tools: Sequence[ToolRun]) -> dict:
    """Each tool execution's model call, by the id of the tool call: the id the execution names
    among the ids of the calls' responses, wherever the spans nest and whenever they end. Only
    an execution without an id, or whose id no response of the export lists while a response
    lists calls without ids, falls back on time: the latest answered call of its run that ended
    by the time it started (CLOCK_SLACK_NS allowed), and there the first call of the same name
    not yet executed. A call listed in a response is counted once, however many spans execute
    it."""
    # Ids are unique within a run, not across runs (a replayed conversation, a stub or a hostile
    # export repeats them): the tool's own run first, another run's only when one alone has it.
    by_id: dict[str, dict[str, tuple[tuple[str, str], int]]] = {}
    answered: dict[str, list[Call]] = {}
    for call in calls:
        for i, called in enumerate(call.called):
            call_id = called.get("id")
            if isinstance(call_id, str) and call_id:
                by_id.setdefault(call_id, {}).setdefault(call.run_id, (call.span_key, i))
        if not call.failed:
            answered.setdefault(call.run_id, []).append(call)
    ends: dict[str, list[int]] = {}
    for run_id, run_calls in answered.items():
        run_calls.sort(key=lambda c: (c.end_ns, c.start_ns, c.span_key[1]))
        ends[run_id] = [c.end_ns for c in run_calls]
    taken: set[tuple[tuple[str, str], int]] = set()
    out: dict[tuple[str, str], Attribution] = {}
    for tool in sorted(tools, key=lambda t: (t.start_ns, t.span_key[1])):
        runs = by_id.get(tool.call_id or "", {})
        owner = runs.get(tool.run_id) or (next(iter(runs.values())) if len(runs) == 1 else None)
        if owner is not None:
            key, index = owner
            taken.add((key, index))
            out[tool.span_key] = Attribution(key, index)
            continue
        run_calls = answered.get(tool.run_id, [])
        started = tool.start_ns + CLOCK_SLACK_NS
        ended = bisect.bisect_right(ends.get(tool.run_id, []), started)
        call = run_calls[ended - 1] if ended else None
        out[tool.span_key] = _by_time(tool, call, taken)
    return out


def _by_time(tool: ToolRun, call: Call | None, taken: set) -> Attribution:
    if call is None:
        return Attribution(None, None)
    for i, called in enumerate(call.called):
        if called["name"] != tool.name or (call.span_key, i) in taken:
            continue
        if tool.call_id is not None and called.get("id"):
            continue  # both have ids, and they differ: another call's execution
        taken.add((call.span_key, i))
        return Attribution(call.span_key, i)
    if tool.call_id is not None and any(c.get("id") for c in call.called):
        return Attribution(None, None)  # its call is one this export does not hold
    return Attribution(call.span_key, None)

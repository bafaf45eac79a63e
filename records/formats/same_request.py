"""Model-call spans that report one request, counted once.

Two instrumentations of one stack each make a span for the same request:

- nested: the OpenAI Agents SDK's generation span wraps the ChatCompletion span of
  OpenInference's openai instrumentation. The call is read from the inner span, which takes
  what only the outer one names (it inherits the outer's run and agent through its lineage);
- apart: LangChain.js's callbacks never make their span current, so the openai client's span
  under it opens a trace of its own. A model-call span that is the root of its trace, inside
  the time of a model-call span of another trace that asks the same model and agrees on the
  outcome (the same response id when both name one, both failed or both answered), is that
  span's request: the call is read from the enclosing span, which keeps the run, and takes
  what only the root span names.

The spans dropped are counted as seen. Pure functions over one export's model calls.
"""

from __future__ import annotations

from records.formats import trace_decisions
from records.formats.otlp_records import Mapping, PendingCall
from records.formats.otlp_spans import Trace

# LangChain.js and the OpenTelemetry JS SDK time some spans to the millisecond.
_SLACK_NS = 1_000_000
_FIELDS = ("provider", "request_model", "response_model", "offered", "response_id", "called",
           "input_tokens", "output_tokens", "finish_reasons", "messages_count")  # fmt: skip
SEEN = "model_call (the same request as another span)"


def count_once(trace: Trace, mapping: Mapping) -> None:
    dropped = _nested(trace, mapping) | _apart(mapping)
    if not dropped:
        return
    mapping.calls = [p for p in mapping.calls if p.call.span_key not in dropped]
    mapping.seen[SEEN] = mapping.seen.get(SEEN, 0) + len(dropped)


def _nested(trace: Trace, mapping: Mapping) -> set[tuple[str, str]]:
    keys = {p.call.span_key: p for p in mapping.calls}
    inner_of: dict[tuple[str, str], list[PendingCall]] = {}
    for pending in mapping.calls:
        for ancestor in trace.ancestors(pending.span):
            key = (ancestor.trace_id, ancestor.span_id)
            if key in keys:
                inner_of.setdefault(key, []).append(pending)
                break
    for key, inner in inner_of.items():
        if len(inner) == 1:
            _fill(inner[0], keys[key])
    return set(inner_of)


def _apart(mapping: Mapping) -> set[tuple[str, str]]:
    roots = [p for p in mapping.calls if not p.span.parent_span_id]
    if not roots:
        return set()
    enclosing = [p for p in mapping.calls if p.span.parent_span_id]
    dropped: set[tuple[str, str]] = set()
    taken: set[tuple[str, str]] = set()
    for root in sorted(roots, key=lambda p: (p.span.start_ns, p.span.span_id)):
        found = [o for o in enclosing if o.call.span_key not in taken and _same(root, o)]
        if not found:
            continue
        outer = min(found, key=lambda o: (o.span.end_ns - o.span.start_ns, o.span.span_id))
        taken.add(outer.call.span_key)
        dropped.add(root.call.span_key)
        _fill(outer, root)
    return dropped


def _same(root: PendingCall, outer: PendingCall) -> bool:
    inner, span = root.span, outer.span
    if inner.trace_id == span.trace_id or root.call.failed != outer.call.failed:
        return False
    if not (
        span.start_ns - _SLACK_NS <= inner.start_ns and inner.end_ns <= span.end_ns + _SLACK_NS
    ):
        return False
    ids = (root.read.response_id, outer.read.response_id)
    if all(ids) and ids[0] != ids[1]:
        return False
    asked = (root.call.request_model, outer.call.request_model)
    return bool(all(asked)) and trace_decisions.base_model(asked[0]) == trace_decisions.base_model(
        asked[1]
    )


def _fill(kept: PendingCall, other: PendingCall) -> None:
    """What only `other` names, given to `kept` (its read and its call)."""
    for name in _FIELDS:
        if getattr(kept.read, name) in (None, []) and getattr(other.read, name) not in (None, []):
            value = getattr(other.read, name)
            setattr(kept.read, name, value)
            if hasattr(kept.call, name):
                setattr(kept.call, name, value)
    if kept.call.explicit_iteration is None:
        kept.call.explicit_iteration = other.call.explicit_iteration
    ids = {c["name"]: [] for c in other.read.called}
    for c in other.read.called:
        if c.get("id"):
            ids[c["name"]].append(c["id"])
    for c in kept.read.called:
        if "id" not in c and ids.get(c["name"]):
            c["id"] = ids[c["name"]].pop(0)

"""One run's records as the run page and the pick page show them.

Pure functions over the records of one run (plain dicts from `Record.objects.values()`): no
query here. Every string that comes from a record stays a plain string: the templates escape it.

Records that carry an iteration (picks, pick errors, outcomes, model calls, and model selections
by their `step`) open or join that iteration; the others (turns, verdicts, notices, provider
errors, reliability events) stand where they happened, in the iteration under way at their ts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.utils.html import format_html_join

from dashboard.formatting import duration_ms, offset, record_cost
from dashboard.formatting import tokens as format_tokens
from records.contract.kinds import KINDS
from records.contract.renderings.kind_rendering import Millis, details, text_of
from records.contract.rollup_keys import MODEL_CALL, OUTCOME, PICK, PICK_ERROR, SELECTION

# The run page shows a run's records this many at a time: a page's size and render time grow
# with its records (a run of tens of thousands would be a page of megabytes that takes
# seconds), and most runs fit in one.
PAGE_SIZE = 200
# A run that has not stopped and had a record this recently is live: its page polls for more.
ACTIVE_FOR = timedelta(minutes=10)
# The kinds whose records link to the pick drill-down.
PICKS = tuple(name for name, spec in KINDS.items() if spec.rendering.opens_pick)
FIELDS = ("id", "kind", "ts", "iteration", "model", "latency_ms", "tokens_in", "tokens_out",
          "is_swap", "is_fallback", "is_error", "is_contract_break", "cost_nano",
          "cost_source")  # fmt: skip


@dataclass
class Item:
    id: int
    kind: str
    ts: datetime
    offset_ms: float
    iteration: int | None
    iteration_label: str
    model: str | None
    latency_ms: float | None
    title: str
    details: list[tuple[str, str]]
    flags: list[str]
    pick_iteration: int | None = None  # set on picks and pick errors: links to the drill-down

    @property
    def details_html(self) -> str:
        """The details as <dt>/<dd> pairs, every value escaped (format_html).

        Built here rather than by a template loop: a run page has hundreds of records, each
        with several details, and template tags cost ten times what this does.
        """
        return format_html_join("", "<div><dt>{}</dt><dd>{}</dd></div>", self.details)

    @property
    def when(self) -> str:
        return offset(self.offset_ms)

    @property
    def ts_title(self) -> str:
        return self.ts.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


@dataclass
class Iteration:
    number: int | None
    items: list[Item] = field(default_factory=list)
    # The first group of a later page: records of an iteration begun on the page before.
    continued: bool = False

    @property
    def label(self) -> str:
        if self.number is not None:
            return f"iteration {self.number}" + (" (continued)" if self.continued else "")
        return (
            "continued from the previous page" if self.continued else "before the first iteration"
        )


def describe(kind: str, data: dict, derived: dict) -> tuple[str, list[tuple[str, str]]]:
    """A one-line title and labelled details for one record of any kind: the kind's own
    description (records.contract.kinds), its durations written the pages' way."""
    d = data if isinstance(data, dict) else {}
    der = derived if isinstance(derived, dict) else {}
    spec = KINDS.get(kind)
    if spec is None:  # a kind no longer registered: its plain fields
        return kind, details(*((k, v) for k, v in d.items() if not isinstance(v, dict | list)))
    title, shown = spec.rendering.describe(d, der)
    return title, [
        (label, duration_ms(value.value) if isinstance(value, Millis) else value)
        for label, value in shown
    ]


_FLAGS = (("is_swap", "swap"), ("is_fallback", "fallback"), ("is_error", "error"),
          ("is_contract_break", "contract break"))  # fmt: skip


def item_of(record: dict, start: datetime, iteration: int | None) -> Item:
    title, details = describe(record["kind"], record["data"], record["derived"])
    violations = _violations(record["derived"])
    if violations:
        details.append(("broken contract", ", ".join(violations)))
    details.extend(_trace_gaps(record["data"]))
    # A record with usage (a model call, a pick's classifier, a turn's reported total).
    cost = record_cost(record.get("cost_nano"), record.get("cost_source"), record["model"])
    if cost:
        details.append(("cost", cost))
    return Item(
        id=record["id"],
        kind=record["kind"],
        ts=record["ts"],
        offset_ms=(record["ts"] - start).total_seconds() * 1000,
        iteration=iteration,
        iteration_label="–" if iteration is None else str(iteration),
        model=record["model"],
        latency_ms=record["latency_ms"],
        title=title,
        details=details,
        flags=[label for column, label in _FLAGS if record.get(column)]
        + (["violation"] if violations else []),
        pick_iteration=record["iteration"] if record["kind"] in PICKS else None,
    )


def _trace_gaps(data: Any) -> list[tuple[str, str]]:
    """What the span a record was read from did not say (records.formats.otlp_mapping keeps it in
    data.otel): the record holds "unknown" or 0 there, and the operator should know why."""
    otel = data.get("otel") if isinstance(data, dict) else None
    if not isinstance(otel, dict):
        return []
    gaps = []
    missing = otel.get("missing")
    if isinstance(missing, list) and missing:
        gaps.append(("from trace", f"this span lacked {', '.join(text_of(m) for m in missing)}"))
    if otel.get("usageReported") is False:
        gaps.append(("from trace", "this span reported no token counts (stored as 0)"))
    return gaps


def _violations(derived: Any) -> list[str]:
    codes = derived.get("violations") if isinstance(derived, dict) else None
    return [str(code) for code in codes] if isinstance(codes, list) else []


def build(
    records: Iterable[dict],
    start: datetime,
    *,
    later_page: bool = False,
    previous: int | None = None,
) -> list[Iteration]:
    """Group a run's records (in ts order) into iterations, each record where it happened.

    On a later page of the run, the first group continues the page before when it has no
    iteration of its own or the same one as `previous` (the iteration of the record before it).
    """
    out: list[Iteration] = []
    current: Iteration | None = None
    for record in records:
        number = record["iteration"]
        if number is not None and (current is None or current.number != number):
            # Revisit an iteration already open (a late outcome) rather than opening a copy.
            current = next((it for it in out if it.number == number), None)
            if current is None:
                current = Iteration(number, continued=later_page and not out and number == previous)
                out.append(current)
        elif current is None:
            current = Iteration(None, continued=later_page)
            out.append(current)
        current.items.append(item_of(record, start, current.number))
    return out


def items(iterations: Sequence[Iteration]) -> list[Item]:
    return [item for it in iterations for item in it.items]


def stopped(records: Iterable[dict]) -> bool:
    """The router said stop: the run is over whatever its last record's age."""
    return any(
        r["kind"] == SELECTION and (r["data"] or {}).get("action") == "stop" for r in records
    )


def is_live(last_ts: datetime, has_stopped: bool, now: datetime) -> bool:
    return not has_stopped and now - last_ts < ACTIVE_FOR


# --- the pick drill-down ------------------------------------------------------------------
def pick_detail(records: Iterable[dict], iteration: int) -> dict | None:
    """The pick (or pick error) at `iteration` and what went with it; None when there is none."""
    out: dict[str, Any] = {"pick": None, "error": None, "outcome": None, "call": None,
                           "selection": None}  # fmt: skip
    for r in records:
        if r["iteration"] != iteration:
            continue
        slot = {PICK: "pick", PICK_ERROR: "error", OUTCOME: "outcome",
                MODEL_CALL: "call", SELECTION: "selection"}.get(r["kind"])  # fmt: skip
        if slot and out[slot] is None:
            out[slot] = r
    if out["pick"] is None and out["error"] is None:
        return None
    record = out["pick"] or out["error"]
    data = record["data"] if isinstance(record["data"], dict) else {}
    derived = record["derived"] if isinstance(record["derived"], dict) else {}
    usage = data.get("usage") or {}
    chart = {
        "ranked": [r for r in data.get("ranked") or () if isinstance(r, dict)],
        "offered": list(data.get("offered") or ()),
        "served": list(data.get("served") or ()),
        "chosen": data.get("chosen"),
        "doors": list(derived.get("doors") or ()),
    }
    outcome = (out["outcome"] or {}).get("data") or {}
    call = (out["call"] or {}).get("data") or {}
    selection = (out["selection"] or {}).get("data") or {}
    return {
        "record": record,
        "failed": out["pick"] is None,
        "chart": chart,
        "classifier": data.get("classifier") or {},
        "narrowed": bool(data.get("narrowed")),
        "skip_reason": data.get("narrowedSkipped"),
        "status": data.get("status"),
        "message": data.get("message"),
        "confidence": data.get("confidence"),
        "latency_ms": data.get("latencyMs"),
        "tokens": format_tokens(
            usage.get("inputTokens") if isinstance(usage, dict) else None,
            usage.get("outputTokens") if isinstance(usage, dict) else None,
        ),
        "violations": list(derived.get("violations") or ()),
        "outcome": {
            "present": out["outcome"] is not None,
            "called": list(outcome.get("called") or ()),
            "first_agrees": outcome.get("firstAgrees"),
            "missed": list((outcome.get("miss") or {}).get("wanted") or ()),
        },
        "call": call,
        "selection": selection,
    }


def neighbours(iterations: Sequence[int], iteration: int) -> tuple[int | None, int | None]:
    """The pick iterations before and after `iteration`."""
    ordered = sorted(set(iterations))
    before = [i for i in ordered if i < iteration]
    after = [i for i in ordered if i > iteration]
    return (before[-1] if before else None), (after[0] if after else None)

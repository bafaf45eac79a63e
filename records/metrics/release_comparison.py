"""Two sides of one agent compared, measure by measure, from the rollups only
(docs/architecture.md, "Comparing two periods").

A side is a release (`release:R`, every rollup row of that release), the weeks before a release's
first record (`before`, beside a release side: every release of the agent then), or a window of
time (`2026-11-01..2026-11-08`, dates or RFC 3339 times; a date is its midnight UTC, the end
excluded). `compare_sides` reads each side's rows once (records.metrics.reader) and gives, per
decision measure, both values, the change B − A, its interval, the p-value and the
Benjamini–Hochberg q-value over the comparison's measures (records.metrics.change_stats), and a
verdict. The API (api/changes.py) and the page (dashboard/views/changes.py) both call it.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from records.contract import rollup_keys
from records.contract.filters import FilterError, check_text, parse_time
from records.contract.rollup_keys import (
    CLASSIFICATION,
    MODEL_CALL,
    OUTCOME,
    PICK_ERROR,
    PICK_LATENCY,
    PICKS,
    PROVIDER_ERROR,
    RUN_LAST,
    SELECTION,
    SELECTION_LINK,
    TOOL,
    TURN,
    VERDICT,
)
from records.contract.sketch import Sketch
from records.metrics import change_stats, reader
from records.metrics.reader import Row

DEFAULT_WEEKS = 4
MAX_WEEKS = 52
REGRESSION, IMPROVEMENT, NO_EVIDENCE = "regression", "improvement", "no evidence"
# A measure with no better direction (the tools' shares) that moved: neither of the two above.
CHANGED = "changed"
_VERDICT_ORDER = {REGRESSION: 0, CHANGED: 1, IMPROVEMENT: 2, NO_EVIDENCE: 3}
# The kinds a comparison reads; PICK_LATENCY with its sketches.
_KINDS = (*PICKS, OUTCOME, SELECTION_LINK, SELECTION, CLASSIFICATION, VERDICT, TURN,
          PROVIDER_ERROR, MODEL_CALL, TOOL, RUN_LAST, PICK_LATENCY)  # fmt: skip
# Tool rows that count one pick each (a skipped pick adds a row per tool besides: not a pick).
_PICK_ROLES = frozenset({"served", "narrowed_out", "door", "unoffered"})


@dataclass(frozen=True)
class Side:
    spec: str  # as asked: "release:R", "before" or "FROM..TO"
    label: str
    release: str | None  # the release read, or None for every release
    start: datetime
    end: datetime
    grain: str

    def runs_query(self, agent: str) -> dict[str, str]:
        """The runs list's filters (records.contract.filters) of the runs behind this side."""
        query = {"agent": agent} if agent else {}
        if self.release is not None:
            query["release"] = self.release
        else:
            query["from"] = _rfc3339(self.start)
            query["to"] = _rfc3339(self.end)
        return query


@dataclass
class MeasureChange:
    """One measure of the comparison, as its row shows it."""

    measure: str  # e.g. "pick_error_rate"
    label: str
    group: dict[str, str]  # what the measure is split by ({"model": ...}, {} overall)
    method: str  # "proportion", "categories", "quantile" or "mean"
    unit: str  # what an observation is: "picks", "outcomes", ... (a quantile: "ms")
    worse: str  # "higher" or "lower": the direction a regression goes ("": none)
    value_a: float | None
    value_b: float | None
    n_a: int
    n_b: int
    change: float | None  # B − A
    interval: tuple[float, float] | None  # of the change
    p_value: float | None  # None: no test (a mean of sums, whose spread no rollup keeps)
    test: str
    has: str = ""  # the runs list's `has=` for the runs behind it, if one fits
    q_value: float | None = None
    verdict: str = NO_EVIDENCE
    # Observations a side would need to find this change, and how many more the smaller has.
    needed_per_side: int | None = None
    more_needed: int | None = None
    detail: dict = field(default_factory=dict)  # categories: the table tested

    @property
    def size(self) -> float:
        """The change relative to the larger side's value (categories: the largest change of a
        share), what the order weighs significance by."""
        if self.change is None:
            return 0.0
        if self.method == "categories":
            return abs(self.change)
        scale = max(abs(self.value_a or 0.0), abs(self.value_b or 0.0))
        return abs(self.change) / scale if scale else 0.0


@dataclass
class Comparison:
    agent: str
    a: Side
    b: Side
    measures: list[MeasureChange]


class ComparisonError(FilterError):
    """A side or parameter that cannot be read: a 400 naming it (api.errors) or the page's
    message."""


def parse_sides(
    project_id: int, agent: str, a: str, b: str, *, weeks: int = DEFAULT_WEEKS, now: datetime
) -> tuple[Side, Side]:
    """Sides A and B from their specs; `before` takes the other side's release."""
    if not a:
        raise ComparisonError("a", "is required: release:<name>, before, or <from>..<to>")
    if not b:
        raise ComparisonError("b", "is required: release:<name>, before, or <from>..<to>")
    if a == "before" and b == "before":
        raise ComparisonError("b", "one side only may be 'before'")
    if a == "before":
        side_b = _parse_side("b", b, now)
        return _before("a", project_id, agent, side_b, weeks), side_b
    side_a = _parse_side("a", a, now)
    if b == "before":
        return side_a, _before("b", project_id, agent, side_a, weeks)
    return side_a, _parse_side("b", b, now)


def compare_sides(project_id: int, agent: str, a: Side, b: Side) -> Comparison:
    """Every measure of A against B, regressions first, then by significance × size."""
    rows_a, rows_b = _read(project_id, agent, a), _read(project_id, agent, b)
    measures = _measures(rows_a, rows_b)
    tested = [m for m in measures if m.p_value is not None]
    for m, q in zip(tested, change_stats.benjamini_hochberg([m.p_value for m in tested]),
                    strict=True):  # fmt: skip
        m.q_value = q
        if q < change_stats.ALPHA and m.change:
            if not m.worse:
                m.verdict = CHANGED
                continue
            worse = m.change > 0 if m.worse == "higher" else m.change < 0
            m.verdict = REGRESSION if worse else IMPROVEMENT
    order = {id(m): i for i, m in enumerate(measures)}
    measures.sort(key=lambda m: (_VERDICT_ORDER[m.verdict], -_weight(m), order[id(m)]))
    return Comparison(agent, a, b, measures)


def _weight(m: MeasureChange) -> float:
    """Significance × size: -log10 of the q-value times the relative change."""
    if m.q_value is None:
        return 0.0
    return -math.log10(max(m.q_value, 1e-300)) * m.size


# --- sides ---------------------------------------------------------------------------------------
def _parse_side(param: str, spec: str, now: datetime) -> Side:
    if spec.startswith("release:"):
        release = check_text(param, spec.removeprefix("release:"))
        if not release:
            raise ComparisonError(param, "names no release: release:<name>")
        # Every bucket kept: a release is compared whole.
        return Side(spec, f"release {release}", release, _EPOCH, now + timedelta(days=1), "day")
    if ".." in spec:
        first, _, last = spec.partition("..")
        start, end = _moment(param, first), _moment(param, last)
        if end <= start:
            raise ComparisonError(param, "ends before it starts")
        return Side(spec, f"{first} to {last}", None, start, end, _grain_of(start, end))
    raise ComparisonError(param, f"{spec!r} is none of release:<name>, before, <from>..<to>")


def _before(param: str, project_id: int, agent: str, other: Side, weeks: int) -> Side:
    if other.release is None:
        raise ComparisonError(param, "'before' needs the other side to be a release")
    if not 1 <= weeks <= MAX_WEEKS:
        raise ComparisonError("weeks", f"must be between 1 and {MAX_WEEKS}")
    first = reader.first_bucket(project_id, "hour", agents=[agent] if agent else None,
                                releases=[other.release])  # fmt: skip
    if first is None:
        raise ComparisonError(param, f"release {other.release!r} has no records to be before")
    start = first - timedelta(weeks=weeks)
    return Side("before", f"{weeks} weeks before {other.release}", None, start, first, "hour")


def _moment(param: str, text: str) -> datetime:
    text = text.strip()
    if len(text) == 10:  # a date: its midnight, UTC
        try:
            return datetime.combine(date.fromisoformat(text), time(), UTC)
        except ValueError:
            raise ComparisonError(param, f"{text!r} is not a date (YYYY-MM-DD)") from None
    try:
        return parse_time(param, text)
    except FilterError as error:
        raise ComparisonError(param, error.message) from None


def _grain_of(start: datetime, end: datetime) -> str:
    """The coarsest grain whose buckets tile [start, end) exactly."""
    if all(t.hour == t.minute == t.second == t.microsecond == 0 for t in (start, end)):
        return "day"
    if all(t.minute == t.second == t.microsecond == 0 for t in (start, end)):
        return "hour"
    return "minute"


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _read(project_id: int, agent: str, side: Side) -> list[Row]:
    return reader.read(
        project_id, side.grain, side.start, side.end, kinds=_KINDS,
        agents=[agent] if agent else None,
        releases=[side.release] if side.release is not None else None,
        sketch_kinds=(PICK_LATENCY,), keep=("kind", "model", "key"), parse_sketches=True,
    )  # fmt: skip


# --- measures ------------------------------------------------------------------------------------
# A proportion measure: (name, label, unit, worse, has, kinds, row -> [(group, successes, trials)])
Split = Callable[[Row, dict], Iterable[tuple[tuple, int, int]]]


def _k(r: Row) -> dict[str, str]:
    return rollup_keys.decode(r.kind, r.key)


def _pick_errors(r: Row, k: dict):
    yield (), r.count if r.kind == PICK_ERROR else 0, r.count


def _skips(r: Row, k: dict):
    reason = k["skip_reason"]
    yield (), r.count if reason else 0, r.count
    if reason:
        yield (("reason", reason),), r.count, 0


def _agreement(r: Row, k: dict):
    if k["agreement"]:
        yield (), r.count if k["agreement"] == "agree" else 0, r.count


def _swaps(r: Row, k: dict):
    swapped = k["selected"] != r.model
    yield (), r.count if swapped else 0, r.count
    yield (("default", r.model),), r.count if swapped else 0, r.count
    if swapped:
        yield (("default", r.model), ("selected", k["selected"])), r.count, 0


def _ladder(r: Row, k: dict):
    fell_back = r.count if k["fell_back"] == "1" else 0
    yield (), fell_back, r.count
    yield (("seat", r.model),), fell_back, r.count
    if fell_back and k["cause"]:  # "": folded before causes were kept
        yield (("cause", k["cause"]),), fell_back, 0


def _contract_broken(r: Row, k: dict):
    broken = r.count if k["verdict"] == "parse_error" else 0
    yield (), broken, r.count
    yield (("model", r.model),), broken, r.count


def _invented(r: Row, k: dict):
    yield (), r.count if k["invented"] == "1" else 0, r.count


def _refusals(r: Row, k: dict):
    yield (), r.count if r.kind == PROVIDER_ERROR and k["refused"] == "1" else 0, r.count


_PROPORTIONS: tuple[tuple[str, str, str, str, str, tuple[str, ...], Split], ...] = (
    ("pick_error_rate", "pick error rate", "picks", "higher", "error", PICKS, _pick_errors),
    ("narrowing_skip_rate", "narrowing skip rate", "picks", "higher", "", PICKS, _skips),
    ("first_pick_agreement", "first-pick agreement", "outcomes", "lower", "", (OUTCOME,),
     _agreement),
    ("selection_agreement", "selection accuracy", "decisions", "lower", "", (SELECTION_LINK,),
     _agreement),
    ("swap_rate", "swap rate", "selections", "higher", "swap", (SELECTION,), _swaps),
    ("ladder_fallback_rate", "ladder fallback rate", "classifications", "higher", "fallback",
     (CLASSIFICATION,), _ladder),
    ("contract_broken_rate", "contract-broken rate", "verdicts", "higher", "contract_break",
     (VERDICT,), _contract_broken),
    ("invented_tool_rate", "invented-tool rate", "turns", "higher", "", (TURN,), _invented),
    ("refused_tool_choice_rate", "refused forced tool choices", "model calls", "higher", "error",
     (MODEL_CALL, PROVIDER_ERROR), _refusals),
)  # fmt: skip


def _measures(rows_a: list[Row], rows_b: list[Row]) -> list[MeasureChange]:
    out: list[MeasureChange] = []
    for name, label, unit, worse, has, kinds, split in _PROPORTIONS:
        counts_a, counts_b = (
            _proportion_counts(rows_a, kinds, split),
            _proportion_counts(rows_b, kinds, split),
        )
        # The measure as a whole always has its row, a side without observations too.
        for group in sorted({(), *counts_a, *counts_b}, key=lambda g: (len(g), g)):
            out.append(_proportion(name, label, unit, worse, has, group, counts_a, counts_b))
    out.append(_tool_share(rows_a, rows_b))
    sketch_a, sketch_b = _latency(rows_a), _latency(rows_b)
    for q in (0.5, 0.95, 0.99):
        change = change_stats.compare_quantiles(sketch_a, sketch_b, q)
        out.append(MeasureChange(
            f"classifier_latency_p{round(q * 100)}", f"classifier latency p{round(q * 100)}",
            {}, "quantile", "ms", "higher", change.value_a, change.value_b, sketch_a.count,
            sketch_b.count, change.difference,
            (change.interval.low, change.interval.high) if change.interval else None,
            change.p_value, "bootstrap" if change.interval else "none",
        ))  # fmt: skip
    out.append(_mean("cost_per_run", "cost per run (USD)", "runs", rows_a, rows_b, _cost_per_run))
    out.append(_mean("tokens_per_call", "tokens per model call", "model calls", rows_a, rows_b,
                     _tokens_per_call))  # fmt: skip
    return out


def _proportion_counts(rows: list[Row], kinds, split: Split) -> dict[tuple, list[int]]:
    """{group: [successes, trials]}; a group whose trials come from a wider one (a reason of
    the skip rate, a pair of the swap rate) takes that one's trials."""
    counts: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        if r.kind in kinds:
            for group, successes, trials in split(r, _k(r)):
                counts[group][0] += successes
                counts[group][1] += trials
    for group, cell in counts.items():
        if cell[1] == 0 and group:
            cell[1] = counts.get(group[:1] if len(group) > 1 else (), [0, 0])[1]
    return counts


def _proportion(name, label, unit, worse, has, group, counts_a, counts_b) -> MeasureChange:
    s_a, n_a = counts_a.get(group, (0, 0))
    s_b, n_b = counts_b.get(group, (0, 0))
    change = change_stats.compare_proportions(s_a, n_a, s_b, n_b)
    interval = change.difference_interval
    return MeasureChange(
        name, label, {key: value for key, value in group}, "proportion", unit, worse,
        change.rate_a, change.rate_b, n_a, n_b, change.difference,
        (interval.low, interval.high) if interval else None,
        change.p_value if change.test != "none" else None, change.test, has,
        needed_per_side=change.needed_per_side, more_needed=change.more_needed,
    )  # fmt: skip


def _tool_share(rows_a: list[Row], rows_b: list[Row]) -> MeasureChange:
    """The share of each tool among the classifier's first picks (TOOL rows ranked top)."""
    counts_a, counts_b = _top_tools(rows_a), _top_tools(rows_b)
    change = change_stats.compare_categories(counts_a, counts_b)
    n_a, n_b = sum(counts_a.values()), sum(counts_b.values())
    moved, most = None, 0.0
    for tool in set(counts_a) | set(counts_b):
        share_a = counts_a[tool] / n_a if n_a else 0.0
        share_b = counts_b[tool] / n_b if n_b else 0.0
        if moved is None or abs(share_b - share_a) > abs(most):
            moved, most = tool, share_b - share_a
    tested = change.test != "none" and n_a and n_b
    return MeasureChange(
        "tool_share", "tool share among picks", {"tool": moved} if moved else {}, "categories",
        "picks", "", counts_a[moved] / n_a if moved and n_a else None,
        counts_b[moved] / n_b if moved and n_b else None, n_a, n_b,
        most if moved and n_a and n_b else None, None, change.p_value if tested else None,
        change.test,
        detail={"categories": list(change.categories), "pooled": list(change.pooled),
                "counts_a": list(change.counts_a), "counts_b": list(change.counts_b),
                "statistic": change.statistic, "dof": change.dof},
    )  # fmt: skip


def _top_tools(rows: list[Row]) -> Counter:
    counts: Counter = Counter()
    for r in rows:
        if r.kind == TOOL:
            k = _k(r)
            if k["ranked"] == "top" and k["role"] in _PICK_ROLES:
                counts[k["tool"]] += r.count
    return counts


def _latency(rows: list[Row]) -> Sketch:
    sketch = Sketch()
    for r in rows:
        if r.kind == PICK_LATENCY:
            reader.merge_into(sketch, r.sketch)
    return sketch


def _cost_per_run(rows: list[Row]) -> tuple[float, int] | None:
    runs = sum(r.count for r in rows if r.kind == RUN_LAST)
    spend = sum(r.cost_nano for r in rows)
    return (spend / 1e9 / runs, runs) if runs else None


def _tokens_per_call(rows: list[Row]) -> tuple[float, int] | None:
    calls = [r for r in rows if r.kind == MODEL_CALL]
    n = sum(r.count for r in calls)
    return (sum(r.tokens_in + r.tokens_out for r in calls) / n, n) if n else None


def _mean(name, label, unit, rows_a, rows_b, of) -> MeasureChange:
    """A mean the rollups keep as a sum and a count: both values and the change, no test (no
    rollup keeps the spread of a run's cost or a call's tokens)."""
    a, b = of(rows_a), of(rows_b)
    value_a, n_a = a or (None, 0)
    value_b, n_b = b or (None, 0)
    change = value_b - value_a if a and b else None
    return MeasureChange(name, label, {}, "mean", unit, "higher", value_a, value_b, n_a, n_b,
                         change, None, None, "none")  # fmt: skip

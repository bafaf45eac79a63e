"""The tool funnel, selection accuracy and the narrowing what-if, folded from rollup rows.

Pure functions over records.metrics.reader.Row of the tool kinds that records.catchup.tool_funnel
writes (see its docstring for what each row counts); the pages (dashboard.queries.tool_queries) read
the rows and call these. Nothing here touches the database.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from records.contract import rollup_keys
from records.contract.rollup_keys import NARROWING, SELECTION_LINK, TOOL, TOOL_CALL, TOOL_LINK
from records.contract.sketch import Sketch
from records.metrics.definitions import METRICS, Calibration, Rate
from records.metrics.reader import Row, merge_into

# The funnel from offered to called, in order (records.catchup.tool_funnel: `called` here is a
# decision's call of a tool its pick offered, served or narrowed out).
FUNNEL = ("offered", "ranked", "served", "chosen", "called")
_LINK_STAGES = frozenset(
    {"called_served", "called_narrowed_out", "called_not_offered", "missed", "chosen_called"}
)


@dataclass
class ToolStats:
    """Everything counted about one tool over a period."""

    name: str
    offered: int = 0
    ranked: int = 0
    rank_sum: int = 0
    score_sum: float = 0.0
    served: int = 0
    narrowed_out: int = 0
    door: int = 0
    chosen: int = 0
    called: int = 0  # outcomes that called it (joined to a pick or not)
    called_served: int = 0
    called_narrowed_out: int = 0
    called_not_offered: int = 0
    missed: int = 0
    chosen_called: int = 0
    # Offered to, and called by, model calls read from traces (records.catchup.tool_funnel:
    # call_offered, call_called): decisions with no classifier, whose ranked, served and chosen
    # stages are not reported.
    call_offered: int = 0
    call_called: int = 0
    calls: int = 0  # turn calls
    invented_calls: int = 0
    error_calls: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # skip reason -> offers
    sketch: Sketch = field(default_factory=Sketch)

    @property
    def mean_rank(self) -> float | None:
        return self.rank_sum / self.ranked if self.ranked else None

    @property
    def mean_score(self) -> float | None:
        return self.score_sum / self.ranked if self.ranked else None

    @property
    def offered_called(self) -> int:
        """Decisions that called it where the pick offered it (served or narrowed out)."""
        return self.called_served + self.called_narrowed_out

    @property
    def error_rate(self) -> float | None:
        return self.error_calls / self.calls if self.calls else None

    @property
    def p50(self) -> float | None:
        return self.sketch.quantile(0.5)

    @property
    def p95(self) -> float | None:
        return self.sketch.quantile(0.95)

    @property
    def all_offered(self) -> int:
        """Offered by a pick or to a model call read from a trace."""
        return self.offered + self.call_offered

    @property
    def all_called(self) -> int:
        """Called while offered, by a pick's decision or a traced model call."""
        return self.offered_called + self.call_called

    @property
    def offers_reported(self) -> bool:
        """Whether anything said what was offered with its calls: a tool only called, by turns
        that name no offered tools (the official GenAI instrumentation and the OpenAI Agents
        SDK do not record them), has offers not reported, not zero."""
        return bool(self.all_offered or self.offered_called or not self.calls)

    @property
    def stages_reported(self) -> bool:
        """Whether any offer came with the classifier's stages (ranked, served, chosen): when
        every offer came from a plain trace, those stages are not reported, not zero."""
        return bool(self.offered or self.ranked or self.served or self.chosen)

    def funnel(self) -> list[tuple[str, int | None]]:
        """Offered → ranked → served → chosen → called; None for a stage not reported."""
        known = self.stages_reported
        return [
            ("offered", self.all_offered),
            ("ranked", self.ranked if known else None),
            ("served", self.served if known else None),
            ("chosen", self.chosen if known else None),
            ("called", self.all_called),
        ]


def tool_stats(rows: Iterable[Row]) -> dict[str, ToolStats]:
    """{tool: ToolStats} from TOOL, TOOL_CALL and TOOL_LINK rows (any columns summed away)."""
    out: dict[str, ToolStats] = {}

    def stats(name: str) -> ToolStats:
        found = out.get(name)
        if found is None:
            found = out[name] = ToolStats(name)
        return found

    for row in rows:
        if row.kind not in (TOOL, TOOL_CALL, TOOL_LINK):
            continue
        k = rollup_keys.decode(row.kind, row.key)
        s = stats(k["tool"])
        if row.kind == TOOL_CALL:
            s.calls += row.count
            if k["invented"] == "1":
                s.invented_calls += row.count
            if k["error"] == "1":
                s.error_calls += row.count
            if row.sketch:
                merge_into(s.sketch, row.sketch)
            continue
        if row.kind == TOOL_LINK:
            stage = k["stage"]
            if stage in _LINK_STAGES:
                setattr(s, stage, getattr(s, stage) + row.count)
            continue
        role = k["role"]
        if role in ("served", "narrowed_out"):
            s.offered += row.count
            setattr(s, role, getattr(s, role) + row.count)
        elif role == "skipped":
            s.skipped[k["reason"]] = s.skipped.get(k["reason"], 0) + row.count
        elif role in ("door", "called", "call_offered", "call_called"):
            setattr(s, role, getattr(s, role) + row.count)
        if k["ranked"] in ("top", "1"):
            s.ranked += row.count
            s.rank_sum += row.tokens_in
            s.score_sum += row.latency_sum
            if k["ranked"] == "top":
                s.chosen += row.count
    return out


def invented(stats: dict[str, ToolStats], top: int = 20) -> list[tuple[str, int]]:
    """The most called invented names: [(name, calls)], most first."""
    names = [(s.name, s.invented_calls) for s in stats.values() if s.invented_calls]
    return sorted(names, key=lambda item: (-item[1], item[0]))[:top]


# --- selection accuracy --------------------------------------------------------------------------
def _rates(name: str, rows: Iterable[Row], by: Callable[[Row], str], bucketed: bool) -> dict:
    metric = METRICS[name]
    cells: dict[str, dict] = defaultdict(dict)
    for row in rows:
        if row.kind != SELECTION_LINK:
            continue
        when = row.bucket if bucketed else None
        for _, args in metric.contribute(row):
            acc = cells[by(row)].get(when)
            if acc is None:
                acc = cells[by(row)][when] = Rate()
            acc.add(*args)
    return cells


def rate_series(
    name: str, rows: Iterable[Row], by: Callable[[Row], str]
) -> dict[str, list[tuple[datetime, float | None, int]]]:
    """A Rate metric of records.metrics.definitions (selection_agreement, chosen_called_rate) per
    group (`by` a row) and bucket: {group: [(bucket, value, count)]} in time order."""
    cells = _rates(name, rows, by, bucketed=True)
    return {
        group: [(t, *by_t[t].result()) for t in sorted(by_t)]
        for group, by_t in sorted(cells.items())
    }


def rate_totals(name: str, rows: Iterable[Row], by: Callable[[Row], str]) -> dict[str, tuple]:
    """{group: (value, count)} of a Rate metric over the whole period."""
    cells = _rates(name, rows, by, bucketed=False)
    return {group: by_t[None].result() for group, by_t in sorted(cells.items())}


def calibration(rows: Iterable[Row]) -> dict[str, Calibration]:
    """{classifier model: Calibration} over SELECTION_LINK rows."""
    contribute = METRICS["calibration_error"].contribute
    out: dict[str, Calibration] = defaultdict(Calibration)
    for row in rows:
        if row.kind != SELECTION_LINK:
            continue
        for group, args in contribute(row):
            out[group["model"]].add(*args)
    return dict(sorted(out.items()))


# --- the narrowing what-if -----------------------------------------------------------------------
@dataclass(frozen=True)
class WhatIf:
    """For each top-N from 1 to the largest offered set: the share of decisions whose called
    tool would have been narrowed out, and the mean tool definitions served (doors included)."""

    decisions: int
    points: list[tuple[int, float, float]]  # (N, miss rate, mean tools served)

    @property
    def largest(self) -> int:
        return self.points[-1][0] if self.points else 0


def whatif(rows: Iterable[Row]) -> WhatIf:
    """The what-if of NARROWING rows (any grouping summed; records.catchup.tool_funnel): a
    decision offered m tools, ranked r of them, needs the top n and was served d doors; at top-N
    below m it misses when n > N and serves min(N, r) + d, from m on it misses nothing and serves
    m + d."""
    needs: dict[tuple[int, int], int] = defaultdict(int)
    ranks: dict[tuple[int, int], int] = defaultdict(int)
    doors = 0
    for row in rows:
        if row.kind != NARROWING:
            continue
        k = rollup_keys.decode(NARROWING, row.key)
        cell = needs if k["side"] == "need" else ranks
        cell[(int(k["offered"]), int(k["n"]))] += row.count
        doors += row.tokens_out
    total = sum(needs.values())
    if not total:
        return WhatIf(0, [])
    largest = max(m for m, _ in needs)
    points = []
    for n in range(1, largest + 1):
        missed = sum(c for (_, need), c in needs.items() if need > n)
        served = sum(c * (m if n >= m else min(n, r)) for (m, r), c in ranks.items()) + doors
        points.append((n, missed / total, served / total))
    return WhatIf(total, points)


def whatif_by(rows: Iterable[Row], by: Callable[[Row], str]) -> dict[str, WhatIf]:
    groups: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        if row.kind == NARROWING:
            groups[by(row)].append(row)
    return {group: whatif(rs) for group, rs in sorted(groups.items())}

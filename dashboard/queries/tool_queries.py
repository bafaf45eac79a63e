"""What the tools, selection-accuracy and narrowing what-if pages show, read from rollups only.

records.catchup.tool_funnel keeps the tool kinds per hour and day (only the selection rows per
minute too), so the tools, tool and what-if pages read hours where a period is drawn in minutes
elsewhere (the last hour, a custom range of up to three hours): their range widens to whole hours,
as the period note says.

The rows are the tool kinds records.catchup.tool_funnel keeps (its docstring defines every count),
read through records.metrics.reader and folded by records.metrics.tool_stats; a tool's page adds the
runs where the tool was missed (records.models.ToolMiss joined to the runs, newest first, a page at
a time). Nothing here reads a record.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import OuterRef, Subquery

from dashboard.queries.page_rollups import get_period, overview_range
from dashboard.queries.tool_definition_cost import definition_costs, savings
from records.contract import rollup_keys
from records.contract.buckets import truncate
from records.contract.rollup_keys import (
    NARROWING,
    PICKS,
    SELECTION_LINK,
    TOOL,
    TOOL_CALL,
    TOOL_LINK,
)
from records.metrics import reader, tool_stats
from records.metrics.definitions import SKIP_REASONS
from records.models import Grain, Run, ToolMiss

MISSED_RUNS = 25  # runs listed per page on a tool's page


def _range(now: datetime, period_name: str):
    period = get_period(period_name)
    start, end = overview_range(now, period.name)
    return period, start, end


def _hourly_range(now: datetime, period_name: str):
    """The period, its grain and [start, end) for the hourly tool kinds
    (records.catchup.tool_funnel keeps no minutes of them): a period drawn in minutes elsewhere
    reads the hours that cover it."""
    period, start, end = _range(now, period_name)
    if period.interval != Grain.MINUTE:
        return period, period.interval, start, end
    last = truncate(end - timedelta(microseconds=1), Grain.HOUR)
    return period, Grain.HOUR, truncate(start, Grain.HOUR), last + timedelta(hours=1)


def tool_rows(project_id, grain, start, end, agents, keep, key_prefix=None, releases=None) -> list:
    """The TOOL and TOOL_LINK rows (summed by the database, score sums too) and the TOOL_CALL
    rows (latency sketches merged here), of `keep`'s columns."""
    counts = reader.read(project_id, grain, start, end, kinds=(TOOL, TOOL_LINK), agents=agents,
                         keep=keep, latency_sums=True, key_prefix=key_prefix,
                         releases=releases)  # fmt: skip
    calls = reader.read(project_id, grain, start, end, kinds=(TOOL_CALL,), agents=agents,
                        sketch_kinds=(TOOL_CALL,), keep=keep, key_prefix=key_prefix,
                        releases=releases)  # fmt: skip
    return counts + calls


def tools_page(
    project_id: int,
    now: datetime,
    period_name: str,
    agents: list[str],
    releases: list[str] | None = None,
) -> dict:
    """Every tool's funnel over the period, the invented names called, the skip reasons.
    Three queries."""
    period, grain, start, end = _hourly_range(now, period_name)
    rows = tool_rows(project_id, grain, start, end, agents, keep=("kind", "key"),
                     releases=releases)  # fmt: skip
    stats = tool_stats.tool_stats(rows)
    skips = reader.read(project_id, grain, start, end, kinds=PICKS, agents=agents,
                        keep=("kind", "key"), releases=releases)  # fmt: skip
    skip_counts = dict.fromkeys(SKIP_REASONS, 0)
    picks = 0
    for row in skips:
        picks += row.count
        reason = rollup_keys.decode(row.kind, row.key)["skip_reason"]
        if reason:
            skip_counts[reason] = skip_counts.get(reason, 0) + row.count
    tools = sorted(
        (s for s in stats.values()
         if s.offered or s.ranked or s.served or s.offered_called or s.call_offered
         or s.call_called or s.calls),
        key=lambda s: (-s.all_offered, s.name),
    )  # fmt: skip
    total = tool_stats.ToolStats("all tools")
    for s in tools:
        for stage in ("offered", "ranked", "served", "chosen", "called_served",
                      "called_narrowed_out", "missed", "call_offered",
                      "call_called"):  # fmt: skip
            setattr(total, stage, getattr(total, stage) + getattr(s, stage))
    missed = sorted((s for s in stats.values() if s.missed), key=lambda s: (-s.missed, s.name))
    return {
        "period": period,
        "start": start,
        "end": end,
        "tools": tools,
        "total": total,
        "missed": missed,
        "invented": tool_stats.invented(stats),
        "skips": skip_counts,
        "picks": picks,
    }


def tool_page(
    project_id: int,
    now: datetime,
    period_name: str,
    agents: list[str],
    name: str,
    before: int | None = None,
    releases: list[str] | None = None,
) -> dict:
    """One tool: its funnel, by classifier model, over time, its skips, calls and errors, and
    the runs of the period where it was missed. Three queries; `seen` False when the period
    holds nothing of it (tool_known then says whether the project ever did)."""
    period, grain, start, end = _hourly_range(now, period_name)
    prefix = rollup_keys.escape(name) + "|"
    rows = tool_rows(project_id, grain, start, end, agents,
                      keep=("bucket", "kind", "model", "key"), key_prefix=prefix,
                      releases=releases)  # fmt: skip
    rows = [r for r in rows if rollup_keys.decode(r.kind, r.key)["tool"] == name]
    stats = tool_stats.tool_stats(rows).get(name) or tool_stats.ToolStats(name)
    by_model: dict[str, list] = {}
    by_time: dict[datetime, list] = {}
    for row in rows:
        if row.kind != TOOL_CALL:
            by_model.setdefault(row.model, []).append(row)
        by_time.setdefault(row.bucket, []).append(row)
    models = {
        rollup_keys.model_label(rollup_keys.model_of(model)): tool_stats.tool_stats(rs).get(name)
        for model, rs in sorted(by_model.items())
        if model  # outcomes (model "") count in the totals, not as a classifier's
    }
    series = [(t, tool_stats.tool_stats(by_time[t]).get(name)) for t in sorted(by_time)]
    return {
        "period": period,
        "start": start,
        "end": end,
        "seen": bool(rows),  # anything of the tool in the period (for these agents)
        "stats": stats,
        "models": {label: s for label, s in models.items() if s is not None},
        "series": [(t, s) for t, s in series if s is not None],
        "missed_runs": missed_runs(project_id, name, start, end, agents, before, releases),
    }


def tool_known(project_id: int, name: str) -> bool:
    """Whether any record of the project, at any time kept, offered, ranked, served or called
    `name`: a pick's tools and an outcome's calls are TOOL rows, a turn's calls TOOL_CALL rows,
    each keyed by the tool first. One index probe of their day rows."""
    return reader.any_key(project_id, Grain.DAY, (TOOL, TOOL_CALL), rollup_keys.escape(name) + "|")


def missed_runs(project_id, name, start, end, agents, before=None, releases=None) -> dict:
    """The runs active in [start, end) where `name` was missed, newest first (by run id, which
    new records never change), MISSED_RUNS a page: {"runs": [...], "next": id or None}."""
    misses = ToolMiss.objects.filter(project_id=project_id, tool=name, run_id=OuterRef("run_id"))
    runs = Run.objects.filter(
        project_id=project_id,
        run_id__in=ToolMiss.objects.filter(project_id=project_id, tool=name).values("run_id"),
        last_ts__gte=start,
        first_ts__lt=end,
    )
    if agents:
        runs = runs.filter(agent__in=agents)
    if releases:
        runs = runs.filter(release__in=releases)
    if before is not None:
        runs = runs.filter(id__lt=before)
    page = list(
        runs.annotate(misses=Subquery(misses.values("misses")[:1]))
        .order_by("-id")
        .only("id", "run_id", "agent", "first_ts", "last_ts", "record_count")[: MISSED_RUNS + 1]
    )
    more = len(page) > MISSED_RUNS
    page = page[:MISSED_RUNS]
    return {"runs": page, "next": page[-1].id if more else None}


def selection_page(
    project_id: int,
    now: datetime,
    period_name: str,
    agents: list[str],
    releases: list[str] | None = None,
) -> dict:
    """First-pick agreement and chosen-vs-called by classifier model and by agent over time,
    and each classifier model's reliability diagram and calibration error. Two queries."""
    period, start, end = _range(now, period_name)
    by_model = reader.read(project_id, period.interval, start, end, kinds=(SELECTION_LINK,),
                           agents=agents, keep=("bucket", "kind", "model", "key"),
                           releases=releases)  # fmt: skip
    by_agent = reader.read(project_id, period.interval, start, end, kinds=(SELECTION_LINK,),
                           agents=agents, keep=("bucket", "kind", "agent", "key"),
                           releases=releases)  # fmt: skip

    def model(row):
        return row.model

    def agent(row):
        return row.agent

    calibration = tool_stats.calibration(by_model)
    return {
        "period": period,
        "start": start,
        "end": end,
        "agreement_by_model": tool_stats.rate_series("selection_agreement", by_model, model),
        "agreement_by_agent": tool_stats.rate_series("selection_agreement", by_agent, agent),
        "chosen_by_model": tool_stats.rate_series("chosen_called_rate", by_model, model),
        "chosen_by_agent": tool_stats.rate_series("chosen_called_rate", by_agent, agent),
        "agreement_totals": tool_stats.rate_totals("selection_agreement", by_model, model),
        "chosen_totals": tool_stats.rate_totals("chosen_called_rate", by_model, model),
        "agent_agreement_totals": tool_stats.rate_totals("selection_agreement", by_agent, agent),
        "agent_chosen_totals": tool_stats.rate_totals("chosen_called_rate", by_agent, agent),
        "calibration": calibration,
    }


def narrowing_page(
    project_id: int,
    now: datetime,
    period_name: str,
    agents: list[str],
    releases: list[str] | None = None,
) -> dict:
    """The narrowing what-if over the period: overall, per classifier model and per agent, and
    what each top-N saves against the full set (dashboard.queries.tool_definition_cost). Two
    reads of rollups, and the project's price overrides when a model call reports toolsCount."""
    period, grain, start, end = _hourly_range(now, period_name)
    rows = reader.read(project_id, grain, start, end, kinds=(NARROWING,),
                       agents=agents, keep=("kind", "agent", "model", "key"),
                       releases=releases)  # fmt: skip
    overall = tool_stats.whatif(rows)
    costs = (definition_costs(project_id, grain, start, end, agents, releases)
             if overall.points else [])  # fmt: skip
    saved, priced_share = savings(overall.decisions, overall.points, costs)
    return {
        "period": period,
        "start": start,
        "end": end,
        "overall": overall,
        "savings": saved,
        "definition_costs": costs,
        "priced_share": priced_share,
        "by_model": tool_stats.whatif_by(rows, lambda r: r.model),
        "by_agent": tool_stats.whatif_by(rows, lambda r: r.agent),
    }

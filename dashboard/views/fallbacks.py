"""Fallback chains (`/fallbacks/`): every way a run ended up on another model than configured.

What moved a run, and the causes, are defined once in records.contract.fallback_causes; each cause
is read where it is already counted (the NOTICE, CLASSIFICATION, RELIABILITY and SELECTION rollups
for the charts, the run summaries' swap and fallback flags for the runs that moved), so a run behind
a counted cause is a listed run.

The page reads those rollups once (records.metrics.reader), the runs table for the runs of the range
(how many moved, and the recent ones with their flags), and one run's records for the chain of
that run ("what was configured, what served, and why"). Nothing here scans records for a chart.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode

from dashboard.charts import category_charts, plotting, time_charts
from dashboard.queries.page_rollups import count_rows, overview_range
from dashboard.queries.release_lines import release_lines
from dashboard.queries.run_list import Sort, keyset_page, run_row
from dashboard.queries.run_records import load_records
from dashboard.web import timerange
from dashboard.web.access import get_project_for_user, get_run_for_user, role_required
from dashboard.web.params import DAMAGED_LINK, chart_context, chart_params, chart_releases
from records.contract import fallback_causes, rollup_keys
from records.contract.cursor import CursorError
from records.contract.fallback_causes import MOVED_RUN
from records.contract.kinds import KINDS as KINDS_BY_NAME
from records.contract.rollup_keys import CLASSIFICATION, NOTICE, SELECTION, VERDICT
from records.metrics.reader import Row
from records.models import Record, Run

# cause -> label, in the order the page lists them (pre-flight first, as a call meets them).
CAUSES = dict(
    zip(
        fallback_causes.CAUSES,
        (
            "pre-flight route fallback (route.fallback_to_primary)",
            "classifier unroutable (route.classifier_unroutable)",
            "classifier ladder walk (seat → main model)",
            "classifier fallback notice (classifier.fallback)",
            "reliability fallback_triggered",
            "router swap (selected ≠ default model)",
        ),
        strict=True,
    )
)
KINDS = fallback_causes.ROW_KINDS
RUNS_SHOWN = 50
CHAIN_RECORDS = 2000  # a run's chain reads at most this many of its records


# --- the rollup fold (pure) ----------------------------------------------------------------------
def cause_of(row: Row) -> str | None:
    """The cause a rollup row counts towards, or None."""
    return fallback_causes.row_cause(row.kind, row.key, row.model)


def fold(rows: Iterable[Row]) -> dict[str, Any]:
    """Totals per cause, counts per cause and bucket, per (cause, configured model, served
    model) — the served model where the rollup knows it (a swap's selected model) — and the
    denominators of the two rates (classifications, selections)."""
    totals: Counter = Counter()
    series: dict[str, Counter] = defaultdict(Counter)
    pairs: Counter = Counter()
    classifications = selections = 0
    for row in rows:
        if row.kind == CLASSIFICATION:
            classifications += row.count
        elif row.kind == SELECTION:
            selections += row.count
        cause = cause_of(row)
        if cause is None:
            continue
        totals[cause] += row.count
        series[cause][row.bucket] += row.count
        served = rollup_keys.decode(SELECTION, row.key)["selected"] if row.kind == SELECTION else ""
        pairs[(cause, row.model, served)] += row.count
    return {
        "totals": {cause: totals[cause] for cause in CAUSES},
        "series": {cause: dict(series[cause]) for cause in CAUSES if series[cause]},
        "pairs": sorted(pairs.items(), key=lambda item: (-item[1], item[0])),
        "classifications": classifications,
        "selections": selections,
    }


def run_counts(
    project_id: int, start: datetime, end: datetime, agents: list[str],
    releases: list[str] | None = None,
) -> dict:  # fmt: skip
    """Runs active in [start, end) and how many of them moved (a swap or a fallback flag),
    from the run summaries: one aggregate over the range's runs (index run_recent)."""
    runs = _runs_in(project_id, start, end, agents, releases)
    return runs.aggregate(
        runs=Count("id"),
        moved=Count("id", filter=MOVED_RUN),
        swapped=Count("id", filter=Q(has_swap=True)),
        fell_back=Count("id", filter=Q(has_fallback=True)),
    )


def _runs_in(project_id: int, start: datetime, end: datetime, agents: list[str], releases=None):
    runs = Run.objects.filter(project_id=project_id, last_ts__gte=start, first_ts__lt=end)
    if releases:  # a run's release, kept as its agent is (records.catchup.upserts.merge_runs)
        runs = runs.filter(release__in=releases)
    return runs.filter(agent__in=agents) if agents else runs


# --- one run's chain (pure) ----------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    ts: datetime
    iteration: int | None
    cause: str
    configured: str
    served: str
    why: str
    record_id: int

    @property
    def cause_label(self) -> str:
        return CAUSES[self.cause]


def chain(records: list[dict]) -> list[Step]:
    """What was configured, what served and why, for each place a run moved to another model.

    `records` are one run's records in ts order (dashboard.queries.run_records.load_records).
    Each kind with a chain role (records.contract.kinds) judges its own records: one role a kind
    for the run, shown every record of its kind first, then asked where each moved the run.
    """
    roles = {name: spec.rendering.chain_role() for name, spec in KINDS_BY_NAME.items()
             if spec.rendering.chain_role}  # fmt: skip
    for r in records:
        if r["kind"] in roles:
            roles[r["kind"]].see(r["data"])
    steps: list[Step] = []
    for r in records:
        move = roles[r["kind"]].move(r["data"]) if r["kind"] in roles else None
        if move:
            steps.append(Step(r["ts"], r["iteration"], move.cause, move.configured, move.served,
                              move.why, r["id"]))  # fmt: skip
    return steps


def _chain_records(run: Run) -> list[dict]:
    """The run's records that can move it, in ts order: swaps, fallback flags (ladder walks,
    reliability fallbacks, fallback notices), the fallback notices by code too, and its verdicts
    (the rung-0 attempts say why a classification walked). Index record_run_ts."""
    notices = [rollup_keys.escape(code) for code in fallback_causes.NOTICE_CAUSES]
    moving = (
        Q(is_swap=True)
        | Q(is_fallback=True)
        | Q(kind=VERDICT)
        | Q(kind=NOTICE, rollup_key__in=notices)
    )
    return load_records(
        Record.objects.filter(project_id=run.project_id, run_id=run.run_id)
        .filter(moving)
        .order_by("ts", "id")[:CHAIN_RECORDS]
    )


# --- pages ---------------------------------------------------------------------------------------
@role_required
def fallbacks_page(request: HttpRequest) -> HttpResponse:
    project = get_project_for_user(request)
    chosen, period, agents, error = chart_params(request)
    releases, release_error = chart_releases(request)
    error = error or release_error
    now = timezone.now()
    start, end = overview_range(now, period.name)
    data = fold(count_rows(project.pk, period.interval, start, end, KINDS, agents,
                           releases=releases))  # fmt: skip
    counts = run_counts(project.pk, start, end, agents, releases)
    moved = _runs_in(project.pk, start, end, agents, releases).filter(MOVED_RUN)
    try:
        runs, next_cursor = keyset_page(
            moved, Sort("last_ts", True), request.GET.get("after"), RUNS_SHOWN
        )
    except CursorError:
        runs, next_cursor, error = [], None, DAMAGED_LINK
    data.update(period=period, start=start, end=end)
    partial = timerange.in_progress(period, start, end, now)
    series = [
        (CAUSES[cause], [(t, by_t[t]) for t in sorted(by_t)])
        for cause, by_t in data["series"].items()
    ]
    rows = []
    for run in runs:
        row = run_row(run)
        row["chain_url"] = reverse("dash-fallback-run", args=[run.run_id])
        rows.append(row)
    query = {k: v for k, v in request.GET.items() if k != "after"}
    context = {
        **chart_context(project, data, agents, error, chosen, releases),
        "causes": [(c, CAUSES[c], data["totals"][c]) for c in CAUSES],
        "counts": counts,
        "funnel_figure": category_charts.fallback_funnel(
            counts["runs"], counts["moved"], [(CAUSES[c], data["totals"][c]) for c in CAUSES]
        )
        if counts["runs"] or any(data["totals"].values())
        else None,
        "series_figure": plotting.over_period(
            time_charts.counts_over_time(series, ytitle="fallbacks"),
            start,
            end,
            partial,
            release_lines(project.pk, start, end, agents),
        ),  # fmt: skip
        "pairs": [
            (CAUSES[cause], rollup_keys.model_label(rollup_keys.model_of(model)), served, n)
            for (cause, model, served), n in data["pairs"]
        ],
        "rows": rows,
        "next_query": urlencode({**query, "after": next_cursor}) if next_cursor else None,
        "empty": timerange.empty_period(project.pk, agents, period, start, end)
        if not counts["runs"] and not any(data["totals"].values())
        else None,
    }
    if request.headers.get("HX-Request"):  # the period form swaps the charts alone
        return render(request, "dashboard/partials/fallbacks_charts.html", context)
    return render(request, "dashboard/fallbacks.html", context)


@role_required
def fallback_run(request: HttpRequest, run_id: str) -> HttpResponse:
    run = get_run_for_user(request, run_id)
    records = _chain_records(run)
    steps = chain(records)
    return render(
        request,
        "dashboard/fallback_run.html",
        {
            "project": run.project,
            "run": run,
            "row": run_row(run),
            "steps": steps,
            "by_cause": Counter(step.cause_label for step in steps).most_common(),
            "capped": len(records) >= CHAIN_RECORDS,
            "chain_records": CHAIN_RECORDS,
        },
    )

"""One run: header, sub-runs, the iteration-by-iteration timeline of every record,
a timeline of latencies, and live refresh while the run is active.

Reads the run summary and this run's records only (index record_run_ts), a page of
timeline.PAGE_SIZE records at a time. While the run is live its last page polls itself with htmx
and is re-rendered whole, so it never misses a record that arrived late or out of order. The
page count comes from the run summary, which the workers keep a few seconds behind ingest.
"""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode

from dashboard.charts import time_charts
from dashboard.queries import timeline
from dashboard.queries.run_records import load_records
from dashboard.web.access import get_run_for_user, role_required
from records.models import Record, Run
from records.store import retention

POLL_SECONDS = 5
SUB_RUNS_SHOWN = 100


def _page_number(request: HttpRequest, pages: int) -> int:
    try:
        return min(max(1, int(request.GET.get("page", "1"))), pages)
    except ValueError:
        return 1


def _timeline_context(request: HttpRequest, run: Run) -> dict:
    size = timeline.PAGE_SIZE
    pages = max(1, -(-run.record_count // size))
    page = _page_number(request, pages)
    # A later page reads the record before it too, to tell whether it opens mid-iteration.
    first = (page - 1) * size - (1 if page > 1 else 0)
    records = load_records(
        Record.objects.filter(project_id=run.project_id, run_id=run.run_id).order_by("ts", "id")[
            first : page * size
        ]
    )
    before = records.pop(0) if page > 1 and records else None
    iterations = timeline.build(
        records,
        run.first_ts,
        later_page=page > 1,
        previous=before["iteration"] if before else None,
    )
    last_page = page == pages
    # The stop, if any, is among the last page's records; earlier pages judge by age alone.
    has_stopped = last_page and timeline.stopped(records)
    live = timeline.is_live(run.last_ts, has_stopped, timezone.now())
    return {
        "run": run,
        "iterations": iterations,
        "page": page,
        "pages": pages,
        "first_shown": (page - 1) * size + 1 if records else 0,
        "last_shown": (page - 1) * size + len(records),
        # Only the last page grows: it alone polls while the run is live.
        "live": live,
        "poll": live and last_page,
        "stopped": has_stopped,
        "poll_seconds": POLL_SECONDS,
        "latency_figure": time_charts.run_latencies(timeline.items(iterations)),
    }


# /runs/compare/ is the page of the run named "compare" (run ids are the agents' to choose);
# links to the comparison at that path reach it still: those carrying its arguments, and the
# bare path when no run has that name.
COMPARE_PATH_ID = "compare"
COMPARE_ARGS = ("a", "b", "run")


def _to_comparison(request: HttpRequest) -> HttpResponse:
    query = request.GET.urlencode()
    return redirect(reverse("dash-runs-compare") + (f"?{query}" if query else ""))


@role_required
def run_detail(request: HttpRequest, run_id: str) -> HttpResponse:
    if run_id == COMPARE_PATH_ID and any(request.GET.get(arg) for arg in COMPARE_ARGS):
        return _to_comparison(request)
    try:
        run = get_run_for_user(request, run_id)
    except Http404:
        if run_id == COMPARE_PATH_ID:
            return _to_comparison(request)
        raise
    context = _timeline_context(request, run)
    if request.headers.get("HX-Request"):
        # The live poll: the run's counters and timeline, nothing else.
        return render(request, "dashboard/partials/run_live.html", context)
    context.update(
        project=run.project,
        sub_runs=list(
            Run.objects.filter(project_id=run.project_id, parent_run_id=run.run_id).order_by(
                "first_ts", "id"
            )[:SUB_RUNS_SHOWN]
        ),
        kind_counts=sorted((run.kind_counts or {}).items()),
        models=sorted((run.models_seen or {}).items(), key=lambda m: (-m[1], m[0])),
        export_query=urlencode({"project": run.project.name, "run_id": run.run_id}),
        retention_notice=retention.past_retention_notice(run.project, run.first_ts),
    )
    return render(request, "dashboard/run_detail.html", context)

"""One classifier pick: the ranked distribution with offered, served, chosen and
doors marked, narrowing and its skip reason, the outcome, latency and tokens, and the
neighbouring iterations. Reads this run's records only."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from dashboard.charts import category_charts
from dashboard.queries import timeline
from dashboard.queries.run_records import load_records
from dashboard.web.access import get_run_for_user, role_required
from records.models import Record


@role_required
def pick_detail(request: HttpRequest, run_id: str, iteration: int) -> HttpResponse:
    run = get_run_for_user(request, run_id)
    in_run = Record.objects.filter(project_id=run.project_id, run_id=run.run_id)
    records = load_records(in_run.filter(iteration=iteration).order_by("ts", "id"))
    detail = timeline.pick_detail(records, iteration)
    if detail is None:
        raise Http404("No pick at this iteration.")
    iterations = in_run.filter(kind__in=timeline.PICKS).values_list("iteration", flat=True)
    previous, following = timeline.neighbours(list(iterations), iteration)
    return render(
        request,
        "dashboard/pick.html",
        {
            "project": run.project,
            "run": run,
            "iteration": iteration,
            "detail": detail,
            "figure": None if detail["failed"] else category_charts.ranked(detail["chart"]),
            "previous": previous,
            "next": following,
        },
    )

"""Contract-broken streaks: per model the current and longest streak, when it
last broke, a sparkline of the streak hour by hour, and a link to the runs with the verdicts
behind it. Reads Streak and StreakSegment rows (dashboard.queries.page_rollups.streaks_page)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.http import urlencode

from dashboard.charts import time_charts
from dashboard.queries import page_rollups
from dashboard.web.access import get_project_for_user, role_required
from dashboard.web.params import chart_context, chart_params


@role_required
def streaks_page(request: HttpRequest) -> HttpResponse:
    project = get_project_for_user(request)
    # The time-range control of every chart page: sparklines are hour by hour over it.
    chosen, period, _, error = chart_params(request)
    data = page_rollups.streaks_page(project.pk, timezone.now(), period.name)
    rows = [
        {
            "streak": streak,
            "dom_id": f"spark-{index}",
            "sparkline": time_charts.sparkline(data["sparklines"][streak.model]),
            # The runs holding this model's broken verdicts (and contract-broken notices).
            "runs_query": urlencode(
                {"project": project.name, "model": streak.model, "has": "contract_break"}
            ),
        }
        for index, streak in enumerate(data["streaks"])
    ]
    return render(
        request,
        "dashboard/streaks.html",
        {**chart_context(project, data, [], error, chosen), "rows": rows},
    )

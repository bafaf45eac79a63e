"""Contract-broken streaks (DESIGN §4, §6): per model the current and longest streak, when it
last broke, a sparkline of the streak hour by hour, and a link to the runs with the verdicts
behind it. Reads Streak and StreakSegment rows (dashboard.rollups.streaks_page)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.http import urlencode

from dashboard import figures, rollups, timerange
from dashboard.access import get_project_for_user

# Sparklines are hour by hour: a day or a week of them.
PERIODS = ("24h", "7d")


@login_required
def streaks_page(request: HttpRequest) -> HttpResponse:
    project = get_project_for_user(request)
    period = request.GET.get("period", "24h")
    period = period if period in PERIODS else "24h"
    data = rollups.streaks_page(project.pk, timezone.now(), period)
    rows = [
        {
            "streak": streak,
            "dom_id": f"spark-{index}",
            "sparkline": figures.sparkline(data["sparklines"][streak.model]),
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
        {
            "project": project,
            "data": data,
            "rows": rows,
            "range": timerange.TimeRange(period),
            "presets": timerange.presets(only=PERIODS),
        },
    )

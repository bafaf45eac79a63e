"""The models page (DESIGN §6): the swap matrix default → selected, swaps over time, the model
the router selected at each step, refused forced tool choices by provider and model, and model
call latency and tokens. One rollup read (dashboard.rollups.models_page)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from dashboard import figures, rollups
from dashboard.access import get_project_for_user
from dashboard.params import chart_context, chart_params


@login_required
def models_page(request: HttpRequest) -> HttpResponse:
    project = get_project_for_user(request)
    period, agents, error = chart_params(request)
    data = rollups.models_page(project.pk, timezone.now(), period.name, agents)
    context = {
        **chart_context(project, data, agents, error),
        "matrix_figure": figures.swap_matrix(data["matrix"]) if data["matrix"] else None,
        "swaps_figure": figures.percent_lines(data["swap_series"], "swap rate"),
        "paths_figure": figures.model_paths(data["paths"]) if data["paths"] else None,
        "refusals_figure": figures.refusals(data["refused"]) if data["refused"] else None,
    }
    if request.headers.get("HX-Request"):
        return render(request, "dashboard/partials/models_charts.html", context)
    return render(request, "dashboard/models.html", context)

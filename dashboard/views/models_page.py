"""The models page: the swap matrix default → selected, swaps over time, the model
the router selected at each step, refused forced tool choices by provider and model, and model
call latency and tokens, and spend by model and provider. Rollup reads only
(dashboard.queries.page_rollups.models_page, dashboard.queries.cost_rollups.spend_by_model)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from dashboard.charts import category_charts, plotting, time_charts
from dashboard.queries import cost_rollups, page_rollups
from dashboard.queries.release_lines import release_lines
from dashboard.web.access import get_project_for_user, role_required
from dashboard.web.params import chart_context, chart_params, chart_releases
from dashboard.web.timerange import LIVE_SECONDS, empty_period, in_progress
from records.contract.cost import snapshot_label


@role_required
def models_page(request: HttpRequest) -> HttpResponse:
    project = get_project_for_user(request)
    chosen, period, agents, error = chart_params(request)
    releases, release_error = chart_releases(request)
    error = error or release_error
    now = timezone.now()
    data = page_rollups.models_page(project.pk, now, period.name, agents, releases)
    partial = in_progress(period, data["start"], data["end"], now)
    spend = cost_rollups.spend_by_model(project.pk, period.interval, data["start"], data["end"],
                                        agents, releases)  # fmt: skip
    swaps = time_charts.percent_lines(data["swap_series"], "swap rate")
    empty = not (data["matrix"] or data["refused"] or data["errors"] or data["model_calls"]
                 or spend["rows"])  # fmt: skip
    context = {
        **chart_context(project, data, agents, error, chosen, releases),
        "matrix_figure": category_charts.swap_matrix(data["matrix"]) if data["matrix"] else None,
        "kept_only": bool(data["matrix"]) and all(d == s for d, s in data["matrix"]),
        "swaps_figure": plotting.over_period(
            swaps,
            data["start"],
            data["end"],
            partial,
            release_lines(project.pk, data["start"], data["end"], agents),
        ),  # fmt: skip
        "paths_figure": category_charts.model_paths(data["paths"]) if data["paths"] else None,
        "refusals_figure": category_charts.refusals(data["refused"]) if data["refused"] else None,
        "empty": empty_period(project.pk, agents, period, data["start"], data["end"])
        if empty
        else None,
        "spend": spend,
        "price_snapshot": snapshot_label(),
        "live": partial is not None,
        "live_seconds": LIVE_SECONDS,
    }
    if request.headers.get("HX-Request"):
        return render(request, "dashboard/partials/models_charts.html", context)
    return render(request, "dashboard/models.html", context)

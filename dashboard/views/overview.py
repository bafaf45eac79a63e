"""The overview: KPIs against the previous period, time series, firing alerts,
data freshness and the most recent runs of the current project."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from alerts.firing import firing_alerts
from dashboard.charts import plotting, time_charts
from dashboard.queries import cost_rollups, page_rollups
from dashboard.queries.release_lines import release_lines
from dashboard.queries.run_list import run_row
from dashboard.web.access import get_project_for_user, operator_projects, role_required
from dashboard.web.params import chart_context, chart_params, chart_releases
from dashboard.web.timerange import LIVE_SECONDS, empty_period, in_progress
from records.contract.cost import snapshot_label
from records.metrics.freshness import project_freshness
from records.models import Run
from workers.heartbeat import queue_status

RECENT_RUNS = 15
RATE_LABELS = {
    "ladder_fallback_rate": "ladder fallback",
    "narrowing_skip_rate": "narrowing skip",
    "swap_rate": "swap",
    "pick_error_rate": "pick error",
}


@role_required
def overview(request: HttpRequest) -> HttpResponse:
    if not operator_projects(request):
        # The landing page after login: say what to do rather than answer 404.
        return render(request, "dashboard/no_projects.html")
    project = get_project_for_user(request)
    chosen, period, agents, error = chart_params(request)
    releases, release_error = chart_releases(request)
    error = error or release_error
    now = timezone.now()
    data = page_rollups.overview(project.pk, now, period.name, agents, releases)
    partial = in_progress(period, data["start"], data["end"], now)
    spend_by_model = cost_rollups.spend_over_time(project.pk, period.interval, data["start"],
                                                  data["end"], agents, releases)  # fmt: skip
    figures_ = {
        "records_figure": time_charts.records_by_kind(data["records_by_kind"]),
        "latency_figure": time_charts.latency_by_model(data["latency_by_model"]),
        "rates_figure": time_charts.rates_over_time(data["rates"], RATE_LABELS),
        "spend_figure": time_charts.spend_by_model(spend_by_model),
    }
    markers = release_lines(project.pk, data["start"], data["end"], agents)
    figures_ = {
        name: plotting.over_period(f, data["start"], data["end"], partial, markers)
        for name, f in figures_.items()
    }
    records = next(k for k in data["kpis"] if k.name == "records")
    queues = queue_status()
    context = {
        **chart_context(project, data, agents, error, chosen, releases),
        **figures_,
        "empty": empty_period(project.pk, agents, period, data["start"], data["end"])
        if not records.count
        else None,
        "live": partial is not None,
        "live_seconds": LIVE_SECONDS,
        "recent_runs": [
            run_row(r)
            for r in Run.objects.filter(project=project).order_by("-last_ts", "-id")[:RECENT_RUNS]
        ],
        "freshness": project_freshness(project.pk, now),
        "queues": queues,
        "stale_queues": [q.queue for q in queues if q.stale],
        # Firing alerts of every project the operator is in: one firing elsewhere matters too.
        "firing_alerts": firing_alerts([p.pk for p in operator_projects(request)]),
        "now": now,
        "spend": data["spend"],
        "price_snapshot": snapshot_label(),
    }
    # htmx asks for everything below the header when the period or agent changes, and every
    # LIVE_SECONDS while the page is live.
    if request.headers.get("HX-Request"):
        return render(request, "dashboard/partials/overview_live.html", context)
    return render(request, "dashboard/overview.html", context)

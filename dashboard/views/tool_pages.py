"""The tools pages: every tool's funnel (/tools/), one tool (/tools/<name>/), selection accuracy
without a judge (/selection/) and the narrowing what-if (/narrowing/). Each reads rollups only
(dashboard.queries.tool_queries); what each number counts is defined once, in
records.catchup.tool_funnel."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.http import urlencode

from dashboard.charts import tool_charts
from dashboard.charts.category_charts import bars
from dashboard.charts.plotting import over_period
from dashboard.queries import tool_queries
from dashboard.queries.release_lines import release_lines
from dashboard.web.access import get_project_for_user, role_required
from dashboard.web.params import chart_context, chart_params, chart_releases
from dashboard.web.timerange import LIVE_SECONDS, in_progress
from records.contract.cost import snapshot_label
from records.contract.rollup_keys import model_label


def _page(request, template: str, partial: str, context: dict) -> HttpResponse:
    # The time range and agent, for links between these pages (a tool's page, its next page).
    kept = {k: request.GET[k] for k in ("period", "from", "to", "agent") if request.GET.get(k)}
    context["query"] = urlencode(kept)
    if request.headers.get("HX-Request"):
        return render(request, partial, context)
    return render(request, template, context)


@role_required
def tools_list(request: HttpRequest) -> HttpResponse:
    project = get_project_for_user(request)
    chosen, period, agents, error = chart_params(request)
    releases, release_error = chart_releases(request)
    error = error or release_error
    data = tool_queries.tools_page(project.pk, timezone.now(), period.name, agents, releases)
    skips = [(reason, n) for reason, n in data["skips"].items()]
    context = {
        **chart_context(project, data, agents, error, chosen, releases),
        "funnel_figure": tool_charts.funnel(data["total"]) if data["tools"] else None,
        "skips_figure": bars([r for r, _ in skips], [n for _, n in skips], ytitle="picks")
        if any(n for _, n in skips)
        else None,
    }
    return _page(
        request, "dashboard/tools.html", "dashboard/partials/tools_list_body.html", context
    )


def _before(request: HttpRequest) -> int | None:
    value = request.GET.get("before", "")
    # ASCII digits only: str.isdigit() takes "²", which int() refuses.
    return int(value) if value.isascii() and value.isdigit() and len(value) < 19 else None


@role_required
def tool_detail(request: HttpRequest, name: str) -> HttpResponse:
    project = get_project_for_user(request)
    chosen, period, agents, error = chart_params(request)
    releases, release_error = chart_releases(request)
    error = error or release_error
    now = timezone.now()
    data = tool_queries.tool_page(
        project.pk, now, period.name, agents, name, _before(request), releases
    )
    # A name nothing of the project ever named is no tool of it, as an unknown run is no run;
    # a tool with nothing in this period is still one (the page says the period is empty).
    if not data["seen"] and not tool_queries.tool_known(project.pk, name):
        raise Http404("No such tool.")
    partial = in_progress(period, data["start"], data["end"], now)
    stats = data["stats"]
    context = {
        **chart_context(project, data, agents, error, chosen, releases),
        "name": name,
        "stats": stats,
        "funnel_figure": tool_charts.funnel(stats)
        if stats.all_offered or stats.called or stats.call_called
        else None,
        "time_figure": over_period(
            tool_charts.over_time(data["series"]),
            data["start"],
            data["end"],
            partial,
            release_lines(project.pk, data["start"], data["end"], agents),
        )  # fmt: skip
        if data["series"]
        else None,
        "live": partial is not None,
        "live_seconds": LIVE_SECONDS,
    }
    return _page(
        request, "dashboard/tools_tool.html", "dashboard/partials/tools_tool_body.html", context
    )


@role_required
def selection(request: HttpRequest) -> HttpResponse:
    project = get_project_for_user(request)
    chosen, period, agents, error = chart_params(request)
    releases, release_error = chart_releases(request)
    error = error or release_error
    now = timezone.now()
    data = tool_queries.selection_page(project.pk, now, period.name, agents, releases)
    partial = in_progress(period, data["start"], data["end"], now)

    markers = release_lines(project.pk, data["start"], data["end"], agents)

    def timed(figure):
        return over_period(figure, data["start"], data["end"], partial, markers)

    calibration = [
        (model_label(model or None), *cal.result(), cal.reliability())
        for model, cal in data["calibration"].items()
    ]
    context = {
        **chart_context(project, data, agents, error, chosen, releases),
        "agreement_model_figure": timed(tool_charts.rates(data["agreement_by_model"], models=True)),
        "agreement_agent_figure": timed(
            tool_charts.rates(data["agreement_by_agent"], models=False)
        ),
        "chosen_model_figure": timed(tool_charts.rates(data["chosen_by_model"], models=True)),
        "chosen_agent_figure": timed(tool_charts.rates(data["chosen_by_agent"], models=False)),
        "reliability_figure": tool_charts.reliability(data["calibration"])
        if any(model and cal.reliability() for model, cal in data["calibration"].items())
        else None,
        "calibration": calibration,
        "model_totals": [
            (model_label(model or None), data["agreement_totals"].get(model, (None, 0)), chosen_)
            for model, chosen_ in data["chosen_totals"].items()
        ],
        "agent_totals": [
            (agent, data["agent_agreement_totals"].get(agent, (None, 0)), chosen_)
            for agent, chosen_ in data["agent_chosen_totals"].items()
        ],
        "live": partial is not None,
        "live_seconds": LIVE_SECONDS,
    }
    return _page(
        request,
        "dashboard/tools_selection.html",
        "dashboard/partials/tools_selection_body.html",
        context,
    )


@role_required
def narrowing(request: HttpRequest) -> HttpResponse:
    project = get_project_for_user(request)
    chosen, period, agents, error = chart_params(request)
    releases, release_error = chart_releases(request)
    error = error or release_error
    data = tool_queries.narrowing_page(project.pk, timezone.now(), period.name, agents, releases)
    by_model = {model_label(m or None): w for m, w in data["by_model"].items()}
    by_agent = {a or "(no agent)": w for a, w in data["by_agent"].items()}
    groups = {"all": data["overall"], **{f"model {k}": w for k, w in by_model.items()}}
    context = {
        **chart_context(project, data, agents, error, chosen, releases),
        "miss_figure": tool_charts.whatif(groups, cost=False) if data["overall"].points else None,
        "cost_figure": tool_charts.whatif(groups, cost=True) if data["overall"].points else None,
        "agent_miss_figure": tool_charts.whatif(by_agent, cost=False)
        if data["overall"].points
        else None,
        "savings_figure": tool_charts.savings(data["savings"])
        if any(s.nano is not None for s in data["savings"])
        else None,
        "by_model": by_model,
        "by_agent": by_agent,
        "price_snapshot": snapshot_label(),
        "whatif_rows": [
            {"n": n, "miss": miss, "served": served, "saved": saved}
            for (n, miss, served), saved in zip(
                data["overall"].points, data["savings"], strict=True
            )
        ],
    }
    return _page(
        request,
        "dashboard/tools_narrowing.html",
        "dashboard/partials/tools_narrowing_body.html",
        context,
    )

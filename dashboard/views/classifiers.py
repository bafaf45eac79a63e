"""The classifiers page: latency percentiles by classifier model over time, skip
reasons, pick errors, first-pick agreement, ladder fallbacks and their causes, the verdict mix,
unavailable causes and role-defaulted reasons. One rollup read
(dashboard.queries.page_rollups.classifiers_page)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from dashboard.charts import category_charts, plotting, time_charts
from dashboard.queries import page_rollups
from dashboard.queries.release_lines import release_lines
from dashboard.web.access import get_project_for_user, role_required
from dashboard.web.params import chart_context, chart_params, chart_releases
from dashboard.web.timerange import LIVE_SECONDS, empty_period, in_progress

VERDICT_CLASSES = ("allow", "block", "parse_error", "unavailable")
# The figures over time, whose current bucket is still filling.
TIME_FIGURES = ("latency_figure", "skip_series_figure", "pick_errors_figure", "agreement_figure",
                "ladder_figure")  # fmt: skip


def verdict_mix(totals: list[dict]) -> tuple[list[str], dict[str, list[int]]]:
    """Verdict totals ({"group": {"model", "verdict"}, "value"}) as stacks per model."""
    models = sorted({t["group"]["model"] for t in totals})
    counts = {(t["group"]["model"], t["group"]["verdict"]): t["value"] for t in totals}
    classes = [c for c in VERDICT_CLASSES if any((m, c) in counts for m in models)]
    classes += sorted({v for _, v in counts} - set(classes))
    return models, {c: [counts.get((m, c), 0) for m in models] for c in classes}


def by_second(counts: dict[tuple[str, str], int]) -> tuple[list[str], dict[str, list[int]]]:
    """{(category, stack): n} as categories and one list per stack."""
    categories = sorted({c for c, _ in counts})
    stacks = sorted({s for _, s in counts})
    return categories, {s or "—": [counts.get((c, s), 0) for c in categories] for s in stacks}


@role_required
def classifiers_page(request: HttpRequest) -> HttpResponse:
    project = get_project_for_user(request)
    chosen, period, agents, error = chart_params(request)
    releases, release_error = chart_releases(request)
    error = error or release_error
    now = timezone.now()
    data = page_rollups.classifiers_page(project.pk, now, period.name, agents, releases)
    partial = in_progress(period, data["start"], data["end"], now)
    skip_totals = [t for t in data["skip_totals"] if t["count"]]
    ladder_causes = [t for t in data["ladder_causes"] if t["value"]]
    models, verdict_stacks = verdict_mix(data["verdicts"])
    causes, dispositions = by_second(data["unavailable"])
    reasons, reason_models = by_second(data["role_defaulted"])
    agreement = {"first-pick agreement": data["agreement"]}
    context = {
        **chart_context(project, data, agents, error, chosen, releases),
        "latency_figure": time_charts.classifier_latency(data["latency"]),
        "skips_figure": category_charts.bars(
            [t["group"]["reason"] for t in skip_totals],
            [t["value"] for t in skip_totals],
            percent=True,
            ytitle="share of picks",
            counts=[t["count"] for t in skip_totals],
        )
        if any(t["value"] for t in skip_totals)
        else None,
        "skip_series_figure": time_charts.percent_lines(data["skip_series"], "share of picks"),
        "pick_errors_figure": time_charts.percent_lines(
            data["pick_errors"]["series"], "error rate"
        ),
        "agreement_figure": time_charts.rates_over_time(agreement, {}),
        "ladder_figure": time_charts.percent_lines(data["ladder"]["series"], "fallback rate"),
        "ladder_causes_figure": category_charts.bars(
            [t["group"]["reason"] for t in ladder_causes],
            [t["value"] for t in ladder_causes],
            percent=True,
            ytitle="share of classifications",
            counts=[t["count"] for t in ladder_causes],
        )
        if ladder_causes
        else None,
        "verdicts_figure": category_charts.stacked(models, verdict_stacks, ytitle="verdicts")
        if models
        else None,
        "unavailable_figure": category_charts.stacked(causes, dispositions, ytitle="notices")
        if causes
        else None,
        "role_figure": category_charts.stacked(reasons, reason_models, ytitle="notices")
        if reasons
        else None,
    }
    markers = release_lines(project.pk, data["start"], data["end"], agents)
    for name in TIME_FIGURES:
        context[name] = plotting.over_period(
            context[name], data["start"], data["end"], partial, markers
        )
    empty = not (data["latency_totals"] or data["verdicts"] or data["agreement_overall"][1])
    context.update(
        empty=empty_period(project.pk, agents, period, data["start"], data["end"])
        if empty and not (data["unavailable"] or data["role_defaulted"])
        else None,
        live=partial is not None,
        live_seconds=LIVE_SECONDS,
    )
    if request.headers.get("HX-Request"):
        return render(request, "dashboard/partials/classifiers_charts.html", context)
    return render(request, "dashboard/classifiers.html", context)

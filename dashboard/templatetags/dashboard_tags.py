"""Inclusion tags and filters of the operator pages (filters wrap dashboard.formatting)."""

from __future__ import annotations

from typing import Any

from django import template
from django.http import QueryDict
from django.utils.html import format_html

from alerts import units
from alerts.evaluate import SYMBOLS
from dashboard import formatting as fmt
from dashboard.charts import plotting
from dashboard.web.access import may, switcher
from records.models import Role

register = template.Library()


@register.filter
def may_edit(request, project_id: int) -> bool:
    """Whether the operator is an editor (or admin) of the project: a page offers the alerting
    actions only to them (config.roles refuses the others)."""
    return may(request, project_id, Role.EDITOR)


register.filter("duration_ms", fmt.duration_ms)
register.filter("percent", fmt.percent)
register.filter("offset", fmt.offset)
register.filter("model_label", fmt.model_label)
register.filter("count", fmt.count)
register.filter("usd", fmt.usd)
register.filter("p_value", fmt.p_value)


@register.filter
def measure_value(m, side: str) -> str:
    """A compared measure's value of side "a" or "b" (records.metrics.release_comparison)."""
    return fmt.measure_value(m.value_a if side == "a" else m.value_b, m.method)


@register.filter
def measure_change(m) -> str:
    return fmt.measure_change(m.change, m.interval, m.method)


@register.filter
def unknown_share(spend) -> str:
    """A dashboard.queries.cost_rollups.SpendTally's records of unknown price, as a clause."""
    return fmt.unknown_share(spend.unknown, spend.records)


@register.filter
def metric_value(value: float | None, metric: str) -> str:
    """An alert value with its unit: a rate in per cent (alerts.units)."""
    return units.display(metric, value)


@register.filter
def comparator_symbol(comparator: str) -> str:
    return SYMBOLS.get(comparator, comparator)


@register.filter
def metric_threshold(value: float | None, metric: str) -> str:
    return units.threshold(metric, value)


@register.filter
def range_field(time_range, which: str) -> str:
    """A time range's From or To field value (dashboard.web.timerange.TimeRange.field)."""
    return time_range.field(which) if time_range is not None else ""


@register.simple_tag
def state_badge(state: str, severity: str = "", silenced_until=None, now=None) -> str:
    """An alert state as a badge: `firing · critical`, a warning in its own colour, and
    `silenced until 14:30 UTC` beside it while the rule is silenced.

    A tag rather than an included template: tables of events and states draw hundreds."""
    tone = "warning" if state == "firing" and severity == "warning" else state
    label = f"{state} · {severity}" if state == "firing" and severity else state
    badge = format_html('<span class="state state-{}">{}</span>', tone, label)
    if silenced_until is not None and now is not None and silenced_until > now:
        badge += format_html(
            ' <span class="state state-silenced">silenced until {} UTC</span>',
            silenced_until.strftime("%Y-%m-%d %H:%M"),
        )
    return badge


@register.filter
def kpi_value(kpi) -> str:
    return fmt.kpi_value(kpi.value, kpi.unit)


@register.filter
def kpi_change(kpi) -> str:
    return fmt.change(kpi.change, kpi.unit)


@register.filter
def kpi_tone(kpi) -> str:
    return fmt.change_tone(kpi.change, kpi.rise_is_bad)


@register.inclusion_tag("dashboard/partials/project_switcher.html", takes_context=True)
def project_switcher(context) -> dict[str, Any]:
    """The header's project switcher, from the session (dashboard.web.access): no query."""
    request = context.get("request")
    projects, current = switcher(request) if request is not None else ([], None)
    return {
        "projects": [{"id": pk, "name": name, "current": pk == current} for pk, name in projects],
        "next": request.get_full_path() if request is not None else "/",
        "csrf_token": context.get("csrf_token"),
    }


@register.inclusion_tag("dashboard/partials/chart.html")
def chart(figure: dict | None, dom_id: str, css_class: str = "chart") -> dict[str, Any]:
    """A Plotly figure: an empty div and the figure as JSON beside it (`<dom_id>-figure`).

    static/dashboard/charts.js draws every `*-figure` JSON element into the element whose id
    is the same without the suffix. The figure never becomes markup (json_script escapes it).
    """
    return {
        # An empty figure says so rather than drawing bare axes (plotting.is_empty).
        "figure": None if plotting.is_empty(figure) else figure,
        "dom_id": dom_id,
        "json_id": f"{dom_id}-figure",
        "css_class": css_class,
    }


@register.inclusion_tag("dashboard/partials/run_flags.html")
def run_flags(run) -> dict[str, Any]:
    flags = [
        (name, label)
        for name, label, on in (
            ("swap", "swap", run.has_swap),
            ("fallback", "fallback", run.has_fallback),
            ("error", "error", run.has_error),
            ("contract_break", "contract break", run.has_contract_break),
        )
        if on
    ]
    return {"flags": flags}


@register.simple_tag(takes_context=True)
def query_with(context, **changes: Any) -> str:
    """The current query string with some parameters set (None or "" removes them)."""
    request = context["request"]
    query: QueryDict = request.GET.copy()
    for name, value in changes.items():
        if value is None or value == "":
            query.pop(name, None)
        else:
            query[name] = value
    encoded = query.urlencode()
    return f"?{encoded}" if encoded else "?"

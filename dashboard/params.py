"""Query parameters shared by the pages: the filter vocabulary and the chart pages' period."""

from __future__ import annotations

from django.http import HttpRequest

from dashboard.rollups import PERIODS, Period, get_period
from records.filters import PARAMS, FilterError, Filters, parse_filters


def filter_params(request: HttpRequest) -> dict[str, str]:
    """The filters of DESIGN §5 from the query string.

    `has` may come as checkboxes (has=swap&has=error) or as one comma list (has=swap,error, as
    the API and shared links write it); both mean the same.
    """
    params = {name: request.GET.get(name, "").strip() for name in PARAMS if name != "has"}
    flags = [f.strip() for value in request.GET.getlist("has") for f in value.split(",")]
    params["has"] = ",".join(f for f in flags if f)
    return {name: value for name, value in params.items() if value}


def parse(request: HttpRequest) -> tuple[Filters, FilterError | None]:
    """The filters, or no filters and the error that names the bad parameter."""
    try:
        return parse_filters(filter_params(request)), None
    except FilterError as exc:
        return Filters(), exc


def chart_params(request: HttpRequest) -> tuple[Period, list[str], FilterError | None]:
    """A chart page's period (?period=1h|6h|24h|7d) and agents (?agent=a,b)."""
    period = get_period(request.GET.get("period"))
    try:
        agents = parse_filters({"agent": request.GET.get("agent", "")}).agents
    except FilterError as exc:
        return period, [], exc
    return period, agents, None


def chart_context(project, data: dict, agents: list[str], error: FilterError | None) -> dict:
    """What every chart page's template reads besides its figures: the project, the page's
    data, the period choices, the agent filter as typed and a bad parameter's error."""
    return {
        "project": project,
        "data": data,
        "periods": PERIODS.values(),
        "agent": ",".join(agents),
        "error": error,
    }

"""Query parameters shared by the pages: the filter vocabulary and the time range
(dashboard.web.timerange) of the lists and chart pages."""

from __future__ import annotations

from datetime import datetime

from django.http import HttpRequest
from django.utils import timezone

from dashboard.queries.page_rollups import Period
from dashboard.web import timerange
from records.contract.filters import PARAMS, FilterError, Filters, parse_filters
from records.store import retention

# What a list says of an `after` its own pages did not write (records.contract.cursor refused it).
DAMAGED_LINK = "this page link is damaged; start again from the first page"


def filter_params(request: HttpRequest) -> dict[str, str]:
    """The filters from the query string.

    `has` may come as checkboxes (has=swap&has=error) or as one comma list (has=swap,error, as
    the API and shared links write it); both mean the same.
    """
    params = {name: request.GET.get(name, "").strip() for name in PARAMS if name != "has"}
    params["period"] = request.GET.get("period", "").strip()
    flags = [f.strip() for value in request.GET.getlist("has") for f in value.split(",")]
    params["has"] = ",".join(f for f in flags if f)
    return {name: value for name, value in params.items() if value}


def list_range(request: HttpRequest) -> timerange.TimeRange:
    """A list's time range (any time unless asked); a bad one is any time (parse names it)."""
    try:
        return timerange.parse_range(request.GET, lists=True)
    except FilterError:
        return timerange.TimeRange(timerange.ANY_TIME)


def time_filters(params: dict[str, str], now: datetime) -> dict[str, str]:
    """The filters with the time range (a preset or custom) as the vocabulary's from/to."""
    start, end = timerange.parse_range(params, lists=True).bounds(now)
    out = {k: v for k, v in params.items() if k not in ("period", "from", "to")}
    out.update({"from": start.isoformat()} if start else {})
    out.update({"to": end.isoformat()} if end else {})
    return out


def parse(request: HttpRequest) -> tuple[Filters, FilterError | None]:
    """The filters, or no filters and the error that names the bad parameter."""
    try:
        return parse_filters(time_filters(filter_params(request), timezone.now())), None
    except FilterError as exc:
        return Filters(), exc


def chart_params(
    request: HttpRequest,
) -> tuple[timerange.TimeRange, Period, list[str], FilterError | None]:
    """A chart page's time range (?period= a preset, or custom with from/to), its Period, and
    agents (?agent=a,b). A bad parameter falls back to the default and is returned."""
    now = timezone.now()
    try:
        chosen = timerange.parse_range(request.GET)
    except FilterError as exc:
        chosen = timerange.TimeRange(timerange.DEFAULT_PERIOD)
        return chosen, chosen.period(now), [], exc
    try:
        agents = parse_filters({"agent": request.GET.get("agent", "")}).agents
    except FilterError as exc:
        return chosen, chosen.period(now), [], exc
    return chosen, chosen.period(now), agents, None


def chart_releases(request: HttpRequest) -> tuple[list[str], FilterError | None]:
    """A rollup page's releases (?release=a,b): rows of those releases only (all when none); a
    bad parameter reads none and is returned, as chart_params does."""
    try:
        return parse_filters({"release": request.GET.get("release", "")}).releases, None
    except FilterError as exc:
        return [], exc


def chart_context(
    project, data: dict, agents: list[str], error: FilterError | None, chosen=None,
    releases: list[str] | None = None,
) -> dict:  # fmt: skip
    """What every chart page's template reads besides its figures: the project, the page's
    data, the time range and its choices, the agent filter as typed, a bad parameter's error
    and whether the range starts before the rollups kept."""
    return {
        "project": project,
        "data": data,
        "range": chosen or timerange.TimeRange(timerange.DEFAULT_PERIOD),
        "presets": timerange.presets(),
        "agent": ",".join(agents),
        # The release filter, on the pages whose rollups honour it (None: not offered).
        "release_filter": releases is not None,
        "release": ",".join(releases or ()),
        "error": error,
        "retention_notice": retention.past_rollup_retention_notice(data.get("start")),
    }

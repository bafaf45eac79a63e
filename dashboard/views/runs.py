"""The runs list: every filter in the URL, sortable, keyset pages.

The filters are records.contract.filters' (the API's and the exports'), applied to the run summaries
the workers keep, so a page is one indexed query however many runs and records there are. A page
link carries the last row's sort value and id (`after`), never an offset: the next page costs
the same as the first and new runs do not shift it.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.http import urlencode

from dashboard.queries.run_list import (
    COUNT_COLUMNS,
    SORTS,
    Sort,
    keyset_page,
    run_row,
)
from dashboard.web import timerange
from dashboard.web.access import get_project_for_user, role_required
from dashboard.web.params import DAMAGED_LINK, filter_params, list_range, parse, time_filters
from records.contract.cursor import CursorError
from records.contract.filters import HAS_FLAGS, FilterError, filter_runs
from records.contract.kinds import KIND_NAMES
from records.models import Run
from records.store import retention


def _range_of(chosen: timerange.TimeRange):
    """(period, start, end) of a list's range, for empty_period's "jump to the latest data"."""
    now = timezone.now()
    period = chosen.period(now)
    start, end = chosen.bounds(now)
    return period, start or period.start or now - period.span, end or now


@role_required
def runs_list(request: HttpRequest) -> HttpResponse:
    project = get_project_for_user(request)
    filters, error = parse(request)
    sort = Sort.parse(request.GET.get("sort"))
    runs: list[Run] = []
    next_cursor = None
    if error is None:
        queryset = filter_runs(Run.objects.filter(project=project), filters)
        try:
            runs, next_cursor = keyset_page(queryset, sort, request.GET.get("after"))
        except CursorError:
            error = DAMAGED_LINK
    params = filter_params(request)
    shared = {"project": project.name, **params}
    try:
        # The exports page takes from/to, not a preset: the range as of now.
        exported = {"project": project.name, **time_filters(params, timezone.now())}
    except FilterError:
        exported = {"project": project.name}
    chosen = list_range(request)
    context = {
        "project": project,
        "range": chosen,
        "presets": timerange.presets(lists=True),
        "empty": timerange.empty_period(project.pk, [], *_range_of(chosen))
        if not runs and error is None and chosen.preset != timerange.ANY_TIME
        else None,
        "rows": [run_row(r) for r in runs],
        "params": params,
        "has": set(params.get("has", "").split(",")) - {""},
        "flags": [(flag, flag.replace("_", " ")) for flag in HAS_FLAGS],
        "kinds": KIND_NAMES,
        "sort": sort,
        "sort_links": {f: sort.toggled(f) for f in SORTS},
        "error": error,
        "retention_notice": retention.past_retention_notice(project, filters.start)
        if error is None
        else None,
        "first_page": not request.GET.get("after"),
        "next_query": urlencode({**shared, "sort": sort.param, "after": next_cursor})
        if next_cursor
        else None,
        # The exports page pre-fills its form from these (dashboard/views/export_pages.py).
        "export_query": urlencode(exported),
        "count_headings": [heading for heading, _ in COUNT_COLUMNS],
    }
    # htmx (filters, sort, next page) swaps the results alone.
    if request.headers.get("HX-Request"):
        return render(request, "dashboard/partials/runs_results.html", context)
    return render(request, "dashboard/runs.html", context)

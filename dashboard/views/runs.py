"""The runs list: every filter in the URL, sortable, keyset pages.

The filters are records.contract.filters' (the API's and the exports'), applied to the run summaries
the workers keep, so a page is one indexed query however many runs and records there are. A page
link carries the last row's sort value and id (`after`), never an offset: the next page costs
the same as the first and new runs do not shift it.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from django.contrib.auth.decorators import login_required
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.utils.timezone import localtime

from dashboard.web import timerange
from dashboard.web.access import get_project_for_user
from dashboard.web.format import duration_ms
from dashboard.web.params import filter_params, list_range, parse, time_filters
from records.contract.filters import HAS_FLAGS, FilterError, filter_runs, parse_time
from records.contract.kinds import KIND_NAMES
from records.contract.rollup_keys import MODEL_CALL, PICK, PICK_ERROR, PROVIDER_ERROR, VERDICT
from records.models import Run
from records.store import retention

PAGE_SIZE = 50
# ?sort= values: a column, descending with a leading "-". Ties break on id in the same direction.
# By last record (the default) a run that gets new records while one pages moves to the front:
# the list is "what is active", and the cursor never repeats or skips a run that did not move.
SORTS = {"last_ts": "last", "first_ts": "first", "record_count": "records"}
DEFAULT_SORT = "-last_ts"


class CursorError(ValueError):
    pass


@dataclass(frozen=True)
class Sort:
    field: str
    descending: bool

    @classmethod
    def parse(cls, value: str | None) -> Sort:
        value = value or DEFAULT_SORT
        descending = value.startswith("-")
        field = value.lstrip("-")
        if field not in SORTS:
            return cls.parse(DEFAULT_SORT)
        return cls(field, descending)

    @property
    def param(self) -> str:
        return f"-{self.field}" if self.descending else self.field

    def ordering(self) -> tuple[str, str]:
        sign = "-" if self.descending else ""
        return f"{sign}{self.field}", f"{sign}id"

    def toggled(self, field: str) -> str:
        """The ?sort= a column header links to: flips the direction of the current column."""
        if field == self.field:
            return field if self.descending else f"-{field}"
        return f"-{field}"


def encode_cursor(value: Any, pk: int) -> str:
    raw = orjson.dumps([value.isoformat() if isinstance(value, datetime) else value, pk])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _whole(value: Any) -> int:
    """A cursor's integer: a JSON integer a bigint column can hold."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63:
        raise ValueError(value)
    return value


def decode_cursor(cursor: str, sort: Sort) -> tuple[Any, int]:
    try:
        value, pk = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if sort.field == "record_count":
            value = _whole(value)
        else:
            value = parse_time("after", value)  # the one reader of outside times
        return value, _whole(pk)
    except (ValueError, TypeError, orjson.JSONDecodeError) as exc:  # FilterError is a ValueError
        raise CursorError("this page link is damaged; start again from the first page") from exc


def keyset_page(
    runs: QuerySet, sort: Sort, cursor: str | None, size: int = PAGE_SIZE
) -> tuple[list[Run], str | None]:
    """One page of `runs` in `sort` order after `cursor`, and the cursor of the next page."""
    if cursor:
        value, pk = decode_cursor(cursor, sort)
        op = "lt" if sort.descending else "gt"
        runs = runs.filter(
            Q(**{f"{sort.field}__{op}": value}) | Q(**{sort.field: value, f"id__{op}": pk})
        )
    rows = list(runs.order_by(*sort.ordering())[: size + 1])
    if len(rows) <= size:
        return rows, None
    rows = rows[:size]
    last = rows[-1]
    return rows, encode_cursor(getattr(last, sort.field), last.pk)


# Kind counts shown as columns: (heading, kinds added up).
COUNT_COLUMNS = (
    ("picks", (PICK, PICK_ERROR)),
    ("calls", (MODEL_CALL,)),
    ("verdicts", (VERDICT,)),
    ("errors", (PICK_ERROR, PROVIDER_ERROR)),
)


_FLAGS = (("swap", "has_swap"), ("fallback", "has_fallback"), ("error", "has_error"),
          ("contract_break", "has_contract_break"))  # fmt: skip
MODELS_SHOWN = 3
TIME = "%Y-%m-%d %H:%M:%S"


def run_row(run: Run) -> dict[str, Any]:
    """What a row of the list shows, from the run summary, formatted here (no query).

    Fifty rows of template tags (dates, urls, inclusion tags) cost more than the page's query;
    plain strings in the row keep the page's time in the query.
    """
    kinds = run.kind_counts or {}
    models = sorted((run.models_seen or {}).items(), key=lambda item: (-item[1], item[0]))
    return {
        "run": run,
        "url": reverse("dash-run-detail", args=[run.run_id]),
        "parent_url": reverse("dash-run-detail", args=[run.parent_run_id])
        if run.parent_run_id
        else "",
        "first": localtime(run.first_ts).strftime(TIME),
        "last": localtime(run.last_ts).strftime(TIME),
        "duration": duration_ms((run.last_ts - run.first_ts).total_seconds() * 1000),
        "counts": [f"{sum(kinds.get(k, 0) for k in ks):,}" for _, ks in COUNT_COLUMNS],
        "records": f"{run.record_count:,}",
        "models": ", ".join(name for name, _ in models[:MODELS_SHOWN]),
        "more_models": max(0, len(models) - MODELS_SHOWN),
        "flags": [
            (name, name.replace("_", " ")) for name, column in _FLAGS if getattr(run, column)
        ],
    }


def _range_of(chosen: timerange.TimeRange):
    """(period, start, end) of a list's range, for empty_period's "jump to the latest data"."""
    now = timezone.now()
    period = chosen.period(now)
    start, end = chosen.bounds(now)
    return period, start or period.start or now - period.span, end or now


@login_required
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
        except CursorError as exc:
            error = exc
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

"""Sessions (`/sessions/`): runs grouped by `session_id`, with their counters, flags and tokens.

The view reads the URL (time range, agent, page link) and renders; what a page shows is read by
dashboard.queries.session_list, which says how a page of sessions is found and what it costs.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode

from dashboard.queries.run_list import COUNT_COLUMNS, run_row
from dashboard.queries.session_list import (
    BATCH,
    FIRST_SLICE,
    MAX_WALK,
    PAGE_SIZE,
    SESSION_RUNS,
    TOKEN_RECORDS,
    considered_runs,
    latest_session_runs,
    page_of_sessions,
    run_tokens,
    session_counters,
    session_row,
    session_tokens,
)
from dashboard.web import timerange
from dashboard.web.access import get_project_for_user, role_required
from dashboard.web.params import DAMAGED_LINK, list_range
from records.contract.cursor import CursorError
from records.contract.filters import FilterError, parse_filters


def _considered(request: HttpRequest, project_id: int) -> tuple[QuerySet, Any, dict, Any]:
    """The runs the list considers (the time range and agent of the URL), the range's
    bounds ({"newest": None when open, "oldest": the earliest time a page takes when open})
    and a bad parameter's error."""
    chosen = list_range(request)
    try:
        start, end = timerange.parse_range(request.GET, lists=True).bounds(timezone.now())
        agents = parse_filters({"agent": request.GET.get("agent", "")}).agents
    except FilterError as exc:
        return considered_runs(project_id, None, None, []), chosen, {}, exc
    runs = considered_runs(project_id, start, end, agents)
    return runs, chosen, {"newest": end, "oldest": start or timerange.EARLIEST}, None


@role_required
def sessions_list(request: HttpRequest) -> HttpResponse:
    project = get_project_for_user(request)
    runs, chosen, bounds, error = _considered(request, project.pk)
    ids: list[str] = []
    next_cursor = None
    if error is None:
        try:
            # How far one page walks is the page's to set, as it sets its size.
            ids, next_cursor = page_of_sessions(
                runs, request.GET.get("after"), PAGE_SIZE, batch_size=BATCH,
                first_slice=FIRST_SLICE, max_walk=MAX_WALK, **bounds,
            )  # fmt: skip
        except CursorError:
            error = DAMAGED_LINK
    counters = session_counters(project.pk, ids)
    tokens = session_tokens(project.pk, ids)
    rows = [
        session_row(s, counters[s], tokens.get(s, (0, 0)) if tokens is not None else None)
        for s in ids
        if s in counters
    ]
    query = {k: v for k, v in request.GET.items() if k != "after"}
    context = {
        "project": project,
        "range": chosen,
        "presets": timerange.presets(lists=True),
        "agent": request.GET.get("agent", ""),
        "rows": rows,
        "error": error,
        "tokens_capped": tokens is None,
        "token_records": TOKEN_RECORDS,
        "count_headings": [heading for heading, _ in COUNT_COLUMNS],
        "first_page": not request.GET.get("after"),
        "first_query": urlencode(query),
        "next_query": urlencode({**query, "after": next_cursor}) if next_cursor else None,
    }
    return render(request, "dashboard/sessions.html", context)


@role_required
def session_detail(request: HttpRequest, session_id: str) -> HttpResponse:
    project = get_project_for_user(request)
    counters = session_counters(project.pk, [session_id])
    if session_id not in counters:
        raise Http404("No such session.")
    runs = latest_session_runs(project.pk, session_id, SESSION_RUNS)
    tokens = run_tokens(project.pk, [(r.run_id, r.record_count) for r in runs])
    rows = []
    for run in runs:
        row = run_row(run)
        row["tokens"] = tokens.get(run.run_id, (0, 0)) if tokens is not None else None
        rows.append(row)
    total = None
    if tokens is not None and len(runs) == counters[session_id]["runs"]:
        total = (sum(t[0] for t in tokens.values()), sum(t[1] for t in tokens.values()))
    context = {
        "project": project,
        "session": session_row(session_id, counters[session_id], total),
        "rows": rows,
        "shown": len(runs),
        "tokens_capped": tokens is None,
        "token_records": TOKEN_RECORDS,
        "count_headings": [heading for heading, _ in COUNT_COLUMNS],
        "compare_url": reverse("dash-runs-compare"),
    }
    return render(request, "dashboard/session.html", context)

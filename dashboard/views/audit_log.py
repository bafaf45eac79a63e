"""The audit log page of a project (its admins'): every change to its keys, members, alerting,
prices and settings, newest first, filtered by action, object type and person, paged by
keyset (`?before=<id>`, never an OFFSET). Its export links to the API's (GET
/api/v1/audit/export), which the admin's session reads.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from dashboard.web.access import get_project_for_user, role_required
from records.contract.filters import FilterError
from records.metrics.audit_reads import (
    AUDIT_FILTERS,
    OBJECT_TYPES,
    AuditFilters,
    actors_of,
    audit_entries,
    entries_before,
    parse_audit_filters,
)

ENTRIES_PER_PAGE = 50


def _before(request: HttpRequest) -> int | None:
    raw = request.GET.get("before", "")
    return int(raw) if raw.isascii() and raw.isdecimal() and int(raw) < 2**63 else None


@role_required
def audit_log(request: HttpRequest) -> HttpResponse:
    project = get_project_for_user(request)
    error = ""
    try:
        filters = parse_audit_filters(request.GET)
    except FilterError as exc:
        error, filters = f"{exc.param}: {exc.message}", AuditFilters()
    entries, older = entries_before(
        audit_entries(project, filters), _before(request), ENTRIES_PER_PAGE
    )
    kept = {"project": project.name, **{n: getattr(filters, n) for n in AUDIT_FILTERS}}
    kept = {name: value for name, value in kept.items() if value}
    return render(
        request,
        "dashboard/audit.html",
        {
            "project": project,
            "entries": entries,
            "filters": filters,
            "error": error,
            "object_types": OBJECT_TYPES,
            "actors": actors_of(project),
            "older_query": urlencode({**kept, "before": older}) if older else "",
            "export_query": urlencode(kept),
        },
    )

"""The exports page: the jobs of the operator's projects, and a form to start one.

The form takes the filter vocabulary of records.contract.filters; its fields can be pre-filled from
the query string, so another page (the runs page) can link here with its filters. A job runs in a
worker (workers.export_jobs) and its file downloads through the API, which checks access again.
"""

from __future__ import annotations

from django.db import transaction
from django.http import Http404
from django.shortcuts import redirect, render

from dashboard.web.access import role_required
from records.contract.filters import HAS_FLAGS, PARAMS, FilterError, parse_time
from records.contract.kinds import KIND_NAMES
from records.formats.record_export import FORMATS
from records.models import Project
from records.store import retention
from workers.export_requests import start_export
from workers.models import ExportJob

JOBS_SHOWN = 50
# Text inputs: every parameter but `has`, which is a set of checkboxes.
TEXT_PARAMS = tuple(p for p in PARAMS if p != "has")
# Shown under each field, not as a placeholder: a date there read as a filled-in filter.
HINTS = {
    "from": "RFC 3339, e.g. 2026-11-20T09:00:00Z",
    "to": "RFC 3339; records before it",
    "kind": "e.g. " + ", ".join(KIND_NAMES[:2]),
}


def _get_project_for_user(request, name: str | None) -> Project:
    """The named project if the operator belongs to it (their only one when unnamed); else 404."""
    projects = Project.objects.for_user(request.user)
    if name:
        project = projects.filter(name=name).first()
    else:
        only = list(projects[:2])
        project = only[0] if len(only) == 1 else None
    if project is None:
        raise Http404("No such project.")
    return project


def _form_values(data) -> dict[str, str]:
    values = {name: (data.get(name) or "").strip() for name in ("project", "format", *TEXT_PARAMS)}
    values["has"] = ",".join(flag for flag in data.getlist("has") if flag)
    return values


def _retention_notice(request, values: dict[str, str]) -> str | None:
    """The past-retention notice for the form's project and `from`, when both are readable."""
    if not values["from"]:
        return None
    try:
        project = _get_project_for_user(request, values["project"])
        return retention.past_retention_notice(project, parse_time("from", values["from"]))
    except (Http404, FilterError):
        return None


def _active(jobs: list[ExportJob]) -> bool:
    return any(j.status in (ExportJob.Status.QUEUED, ExportJob.Status.RUNNING) for j in jobs)


@role_required
def exports_page(request):
    errors: dict[str, str] = {}
    if request.method == "POST":
        values = _form_values(request.POST)
        project = _get_project_for_user(request, values["project"])
        try:
            with transaction.atomic():
                start_export(project, values["format"], values, user=request.user)
        except FilterError as exc:
            errors[exc.param] = exc.message
        else:
            return redirect("dash-exports")
    else:
        values = _form_values(request.GET)
        if values["project"]:  # pre-filled from a link: the same 404 as every other page
            _get_project_for_user(request, values["project"])
    projects = list(Project.objects.for_user(request.user).order_by("name"))
    jobs = list(
        ExportJob.objects.filter(project__in=[p.pk for p in projects])
        .select_related("project")
        .order_by("-id")[:JOBS_SHOWN]
    )
    if request.headers.get("HX-Request") and request.method == "GET":
        # The jobs table polling itself for progress.
        return render(
            request,
            "dashboard/partials/export_jobs.html",
            {"jobs": jobs, "active": _active(jobs)},
        )
    return render(
        request,
        "dashboard/exports.html",
        {
            "projects": projects,
            "jobs": jobs,
            "active": _active(jobs),
            "values": values,
            "errors": errors,
            "retention_notice": _retention_notice(request, values),
            "formats": list(FORMATS),
            "fields": [
                {
                    "name": name,
                    "value": values[name],
                    "error": errors.get(name),
                    "hint": HINTS.get(name, "a comma list matches any of its values"),
                }
                for name in TEXT_PARAMS
            ],
            "flags": [
                {"name": flag, "checked": flag in values["has"].split(",")} for flag in HAS_FLAGS
            ],
        },
        status=400 if errors else 200,
    )

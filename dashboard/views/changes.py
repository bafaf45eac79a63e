"""The release comparison (`/changes/?agent=&a=&b=`): each decision measure of side A against
side B, regressions first, each row linked to the runs behind both sides. The rows are
records.metrics.release_comparison's, read as the API reads them (api.changes.read_comparison)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from api.changes import read_comparison, runs_url
from dashboard.queries.release_lines import marker_release
from dashboard.web.access import get_project_for_user, role_required
from records.metrics.release_comparison import DEFAULT_WEEKS, ComparisonError


@role_required
def compare_changes(request: HttpRequest) -> HttpResponse:
    project = get_project_for_user(request)
    params = request.GET
    comparison, error, rows, sides = None, None, [], {}
    marker = params.get("marker", "")
    if marker:
        # A chart's release marker: its release against what its agent ran before it.
        wellformed = marker.isascii() and marker.isdigit() and len(marker) <= 18
        found = marker_release(project.pk, int(marker)) if wellformed else None
        if found is None:
            error = "marker: no release marker of this project has that id"
        else:
            params = params.copy()
            params["agent"], params["b"] = found[0], f"release:{found[1]}"
            params.setdefault("a", "before")
    asked = {name: params.get(name, "") for name in ("agent", "a", "b", "weeks")}
    if not error and (asked["a"] or asked["b"]):
        try:
            comparison = read_comparison(project.pk, params)
        except ComparisonError as problem:
            error = f"{problem.param}: {problem.message}"
    if comparison is not None:
        agent = comparison.agent
        rows = [
            {
                "m": m,
                "runs_a": runs_url(comparison.a, agent, m.has, project.name),
                "runs_b": runs_url(comparison.b, agent, m.has, project.name),
            }
            for m in comparison.measures
        ]
        sides = {
            "runs_a": runs_url(comparison.a, agent, project=project.name),
            "runs_b": runs_url(comparison.b, agent, project=project.name),
        }
    return render(
        request,
        "dashboard/changes.html",
        {
            "project": project,
            "asked": asked,
            "default_weeks": DEFAULT_WEEKS,
            "comparison": comparison,
            "rows": rows,
            "error": error,
            **sides,
        },
    )

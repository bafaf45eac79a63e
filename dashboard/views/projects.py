"""The header's project switcher: POST a project name, land on the same page of that project."""

from __future__ import annotations

from urllib.parse import urlsplit

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import Resolver404, resolve
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from dashboard.web.access import SESSION_PROJECT, operator_projects

# Pages about one run belong to the project being left: switching from them lands on the runs.
_RUN_PAGES = {"dash-run-detail", "dash-pick"}


def _landing(request: HttpRequest) -> str:
    target = request.POST.get("next") or "/"
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return "/"
    path = urlsplit(target).path or "/"
    try:
        name = resolve(path).url_name
    except Resolver404:
        return "/"
    # The query string is dropped: its filters (a run id, a model) were the other project's.
    return "/runs/" if name in _RUN_PAGES else path


@login_required
@require_POST
def switch_project(request: HttpRequest) -> HttpResponse:
    name = request.POST.get("project", "")
    project = next((p for p in operator_projects(request) if p.name == name), None)
    if project is None:
        raise Http404("No such project.")
    request.session[SESSION_PROJECT] = project.pk
    return redirect(_landing(request))

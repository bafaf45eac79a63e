"""Which project a page shows, and the run a URL names, for the logged-in operator.

An operator belongs to projects (records.Membership; superusers to all). The project they are
looking at is kept in the session and chosen with the header's switcher or `?project=<name>`
(so that a shared URL names its project). Another project's data is a 404, never a 403: a page
does not tell an outsider that a run exists.

The switcher in the header reads the operator's projects from the session, where login and
every page view put them, so the header costs no query on any page (pages of other areas
included, whose query-count tests count every query).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib.auth.signals import user_logged_in
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse

from config import roles
from records.models import Membership, Project, Role, Run

SESSION_PROJECT = "dashboard.project"  # the current project's id
SESSION_PROJECTS = "dashboard.views.projects"  # [[id, name], ...] for the header's switcher


def _remember(request: HttpRequest, projects: list[Project], current: Project | None) -> None:
    """Cache the switcher's list and the current project; write the session only on change."""
    listed = [[p.pk, p.name] for p in projects]
    session = request.session
    if session.get(SESSION_PROJECTS) != listed:
        session[SESSION_PROJECTS] = listed
    if current is not None and session.get(SESSION_PROJECT) != current.pk:
        session[SESSION_PROJECT] = current.pk


def remember_projects_at_login(sender, request: HttpRequest | None, user, **kwargs) -> None:
    if request is None or not hasattr(request, "session"):
        return
    projects = list(Project.objects.for_user(user).order_by("name"))
    _remember(request, projects, projects[0] if projects else None)


user_logged_in.connect(remember_projects_at_login, dispatch_uid="dashboard-projects-at-login")


def operator_projects(request: HttpRequest) -> list[Project]:
    """The operator's projects by name, read once per request."""
    cached = getattr(request, "_dashboard_projects", None)
    if cached is None:
        cached = request._dashboard_projects = list(
            Project.objects.for_user(request.user).order_by("name")
        )
    return cached


def operator_roles(request: HttpRequest) -> dict[int, Role]:
    """The operator's role in each of their projects by id, read once per request, so that a
    page offers only the actions the role allows (config.roles decides them)."""
    cached = getattr(request, "_dashboard_roles", None)
    if cached is None:
        if request.user.is_superuser:
            cached = {p.pk: Role.ADMIN for p in operator_projects(request)}
        else:
            cached = {
                project_id: Role(role)
                for project_id, role in Membership.objects.filter(user=request.user).values_list(
                    "project_id", "role"
                )
            }
        request._dashboard_roles = cached
    return cached


def may(request: HttpRequest, project_id: int, needed: str) -> bool:
    """Whether the operator's role in the project covers `needed`."""
    held = operator_roles(request).get(project_id)
    return held is not None and held.covers(needed)


def get_project_for_user(request: HttpRequest) -> Project:
    """The project the page is about: `?project=`, else the one the login session remembers,
    else the first one.

    One query (the operator's projects). A named project the operator is not in is a 404; an
    operator in no project at all gets a 404 that says so.
    """
    projects = operator_projects(request)
    if not projects:
        _remember(request, projects, None)
        raise Http404("You are not a member of any project yet.")
    wanted = request.GET.get("project")
    if wanted:
        current = next((p for p in projects if p.name == wanted), None)
        if current is None:
            raise Http404("No such project.")
    else:
        current_id = request.session.get(SESSION_PROJECT)
        current = next((p for p in projects if p.pk == current_id), projects[0])
    _remember(request, projects, current)
    return current


def projects_for_page(request: HttpRequest):
    """The operator's projects for a page that lists all of them (alerts, their history), or
    only the one `?project=` names; one they are not in is a 404, as on every other page."""
    projects = Project.objects.for_user(request.user)
    wanted = request.GET.get("project")
    if wanted:
        projects = projects.filter(name=wanted)
        if not projects.exists():
            raise Http404("No such project.")
    return projects


def get_run_for_user(request: HttpRequest, run_id: str) -> Run:
    """The run `run_id` of the current project, or of another of the operator's projects.

    A run id is unique within a project, so a link shared by an operator looking at another
    project still opens: the page switches to the run's project. Two queries.
    """
    project = get_project_for_user(request)
    allowed = [p.pk for p in operator_projects(request)]
    found = list(
        Run.objects.filter(project_id__in=allowed, run_id=run_id).select_related("project")[:20]
    )
    if not found:
        raise Http404("No such run.")
    run = next((r for r in found if r.project_id == project.pk), found[0])
    if run.project_id != project.pk:
        request.session[SESSION_PROJECT] = run.project_id
    return run


def switcher(request: HttpRequest) -> tuple[list[list], int | None]:
    """The header's projects and the current one, from the session only (no query)."""
    session = getattr(request, "session", None)
    if session is None:
        return [], None
    return session.get(SESSION_PROJECTS) or [], session.get(SESSION_PROJECT)


def _acted_on(request: HttpRequest, url_arguments: dict) -> Project | None:
    """The project a page's action is about: the object its URL names, else the project its
    form posts or its URL names, else the page's current one."""
    if any(argument in url_arguments for argument in roles.OWNERS):
        return roles.project_named_by(url_arguments)
    name = (request.POST.get("project") if request.method == "POST" else None) or request.GET.get(
        "project"
    )
    if name:
        return Project.objects.filter(name=name).first()
    try:
        return get_project_for_user(request)
    except Http404:
        return None


def role_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A page or form for logged-in members holding the role config.roles gives it; a 403 page
    that names the role otherwise (templates/403.html)."""

    @wraps(view)
    def checked(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        needed = roles.needed_role(request)
        if needed is not None and needed != Role.VIEWER:
            reason = roles.refusal(request.user, _acted_on(request, kwargs), needed)
            if reason:
                raise PermissionDenied(reason)
        return view(request, *args, **kwargs)

    return checked

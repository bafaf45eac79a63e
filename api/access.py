"""Who may read which project: a read-scope key its own, an operator the projects they belong to."""

from __future__ import annotations

from rest_framework.exceptions import NotFound, ParseError, PermissionDenied
from rest_framework.permissions import BasePermission

from config import roles
from records.models import ApiKey, Project, Role


class CanRead(BasePermission):
    message = "This API key lacks the read scope."

    def has_permission(self, request, view) -> bool:
        if isinstance(request.auth, ApiKey):
            return request.auth.allows(ApiKey.Scope.READ)
        return bool(request.user and request.user.is_authenticated)


def project_for_request(request) -> Project:
    """The project a read request is about; another project's name is a 404, never a 403."""
    if isinstance(request.auth, ApiKey):
        name = request.query_params.get("project")
        if name and name != request.auth.project.name:
            raise NotFound("No such project.")
        return request.auth.project
    projects = Project.objects.for_user(request.user).order_by("name")
    name = request.query_params.get("project")
    if name:
        project = projects.filter(name=name).first()
        if project is None:
            raise NotFound("No such project.")
        return project
    first_two = list(projects[:2])
    if not first_two:
        raise PermissionDenied("You are not a member of any project.")
    if len(first_two) > 1:
        raise ParseError("You belong to several projects: name one with ?project=.")
    return first_two[0]


class RoleRequired(BasePermission):
    """config.roles for operators' sessions: the role the endpoint needs, in the project of the
    request (a list, a new item) or of the item found. A key's requests pass to its scope's
    rules (CanRead and those built on it)."""

    message = "Your role in this project does not allow this."

    def has_permission(self, request, view) -> bool:
        if isinstance(request.auth, ApiKey) or not request.user.is_authenticated:
            return True
        needed = roles.needed_role(request)
        if needed is None or needed == Role.VIEWER or view.kwargs.get("pk") is not None:
            return True  # an item's project is known once it is found: has_object_permission
        return self.allows(request.user, project_for_request(request), needed)

    def has_object_permission(self, request, view, obj) -> bool:
        if isinstance(request.auth, ApiKey):
            return True
        return self.allows(request.user, obj.project, roles.needed_role(request))

    def allows(self, user, project: Project, needed: Role | None) -> bool:
        reason = roles.refusal(user, project, needed)
        if reason:
            self.message = reason
        return reason is None

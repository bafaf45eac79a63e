"""Which role each page, form and endpoint needs, and the one check of it (docs/access.md).

`RULES` names every URL a member reaches: the role its reads need (GET, HEAD, OPTIONS) and the
role its changes need (POST, PUT, PATCH, DELETE). `OPEN` names the URLs roles do not govern:
login (passwords and single sign-on), an invitation's link (its visitor is not a member yet),
probes, the API's documentation, Django's admin (staff only), and the endpoints only a key reaches
(ingest, OTLP), whose scopes (api.auth) stay the rule. A URL in neither is refused loudly, and
tests/dashboard/test_role_matrix.py fails naming it.

The pages enforce it with `dashboard.web.access.role_required` (a decorator), the API with
`api.access.RoleRequired` (a DRF permission): each finds the project the action is about (the
object the URL names, a key, a rule, a channel, an invitation or, in the API, the item; else the
project a form posts; else the page's or the request's project) and asks `refusal` here. Being
a viewer needs only membership, which the views check themselves (another project's data is a
404), so reads cost no query here. A key-authenticated request is judged by its key's scope alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest

from alerts.models import Channel, Rule
from records.models import ApiKey, Invitation, Project, Role

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")

VIEWER, EDITOR, ADMIN = Role.VIEWER, Role.EDITOR, Role.ADMIN


@dataclass(frozen=True)
class Needs:
    read: Role
    # None: a session changes nothing here (the URL takes no change, or only a key's).
    change: Role | None = None


RULES: dict[str, Needs] = {
    # Pages that only read.
    **{
        name: Needs(VIEWER)
        for name in (
            "dash-overview",
            "dash-runs",
            "dash-runs-compare",
            "dash-pick",
            "dash-run-detail",
            "dash-models",
            "dash-fallbacks",
            "dash-fallback-run",
            "dash-sessions",
            "dash-session",
            "dash-classifiers",
            "dash-streaks",
            "dash-tools",
            "dash-tool",
            "dash-selection",
            "dash-narrowing",
            "dash-changes",
            "dash-alerts",
            "dash-alert-events",
            "dash-project",
        )
    },
    "dash-switch-project": Needs(VIEWER, VIEWER),
    "dash-exports": Needs(VIEWER, VIEWER),
    # Members, their roles and the project's settings (retention): an admin's.
    "dash-project-member": Needs(ADMIN, ADMIN),
    "dash-project-settings": Needs(ADMIN, ADMIN),
    "dash-project-invite": Needs(ADMIN, ADMIN),
    "dash-project-invitation-revoke": Needs(ADMIN, ADMIN),
    # The audit log (who changed what): an admin's to read; nobody changes it.
    "dash-audit": Needs(ADMIN),
    # Keys: every member sees which keys exist (never their secrets); admins mint and revoke.
    "dash-keys": Needs(VIEWER, ADMIN),
    "dash-key-revoke": Needs(ADMIN, ADMIN),
    # Alerting: the forms are an editor's, as are the changes they make.
    "dash-alert-new": Needs(EDITOR, EDITOR),
    "dash-alert-edit": Needs(EDITOR, EDITOR),
    "dash-alert-pause": Needs(EDITOR, EDITOR),
    "dash-alert-silence": Needs(EDITOR, EDITOR),
    "dash-alert-delete": Needs(EDITOR, EDITOR),
    "dash-alert-channel-new": Needs(EDITOR, EDITOR),
    "dash-alert-channel-edit": Needs(EDITOR, EDITOR),
    "dash-alert-channel-test": Needs(EDITOR, EDITOR),
    "dash-alert-channel-enable": Needs(EDITOR, EDITOR),
    # The API: reads a viewer's; POST /records and POST /releases are ingest, a key's alone.
    "api-records": Needs(VIEWER),
    "api-releases": Needs(VIEWER),
    "api-runs": Needs(VIEWER),
    "api-run": Needs(VIEWER),
    "api-export": Needs(VIEWER),
    "api-exports": Needs(VIEWER, VIEWER),
    "api-export-job": Needs(VIEWER),
    "api-export-download": Needs(VIEWER),
    "api-metric": Needs(VIEWER),
    "api-streaks": Needs(VIEWER),
    "api-changes": Needs(VIEWER),
    "api-audit": Needs(ADMIN),
    "api-audit-export": Needs(ADMIN),
    "api-alert-events": Needs(VIEWER),
    "api-alert-rules-list": Needs(VIEWER, EDITOR),
    "api-alert-rules-detail": Needs(VIEWER, EDITOR),
    "api-alert-channels-list": Needs(VIEWER, EDITOR),
    "api-alert-channels-detail": Needs(VIEWER, EDITOR),
    "api-alert-channels-enable": Needs(VIEWER, EDITOR),
    "api-price-overrides-list": Needs(VIEWER, EDITOR),
    "api-price-overrides-detail": Needs(VIEWER, EDITOR),
}

OPEN: frozenset[str] = frozenset(
    {
        "dash-favicon",
        "api-schema",
        "api-docs",
        "api-docs-asset",
        "api-otlp-traces",
        "otlp-traces",
        "ops-metrics",
        "ops-healthz",
        "ops-readyz",
        "login",
        "logout",
        # Single sign-on's start and the provider's redirect back (sso.urls).
        "sso-start",
        "sso-callback",
        "password_change",
        "password_change_done",
        "password_reset",
        "password_reset_done",
        "password_reset_confirm",
        "password_reset_complete",
        # An invitation's link: whoever opens it is not a member yet, so no role can admit
        # them. The link's token does, once, for the account with the invited address
        # (dashboard.views.invitations, records.member_changes.accept).
        "dash-invitation-accept",
    }
)
# Django's admin: its own staff and model permissions.
OPEN_NAMESPACES: frozenset[str] = frozenset({"admin"})

# A URL argument naming an object, and the model that object is: its project is the one acted on.
OWNERS: dict[str, type] = {
    "key_id": ApiKey,
    "rule_id": Rule,
    "channel_id": Channel,
    "invitation_id": Invitation,
}


def is_open(url_name: str | None, namespaces: list[str] | tuple[str, ...] = ()) -> bool:
    return url_name in OPEN or any(ns in OPEN_NAMESPACES for ns in namespaces)


def needed_role(request: HttpRequest) -> Role | None:
    """The role the request's action needs; None when roles do not govern it."""
    match = request.resolver_match
    if match is None or is_open(match.url_name, match.namespaces):
        return None
    needs = RULES.get(match.url_name)
    if needs is None:
        raise ImproperlyConfigured(f"No role rule for the URL named {match.url_name!r}.")
    return needs.read if request.method in SAFE_METHODS else needs.change


def refusal(user, project: Project | None, needed: Role | None) -> str | None:
    """Why `user` may not take an action needing `needed` in `project`, or None when they may.
    A stranger to the project is not refused here: the view's own lookup makes that a 404."""
    if needed is None or needed == VIEWER or project is None:
        return None
    held = project.role_of(user)
    if held is None or held.covers(needed):
        return None
    return f"This needs the {needed} role in {project.name}; you are {held.with_article} there."


def project_named_by(url_arguments: dict) -> Project | None:
    """The project of the object a page's URL names (a key, a rule, a channel), if it names one
    that exists."""
    for argument, model in OWNERS.items():
        if argument in url_arguments:
            item = model.objects.filter(pk=url_arguments[argument]).select_related("project")
            found = item.first()
            return found.project if found is not None else None
    return None

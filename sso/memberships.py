"""The roles a sign-in's group claim gives, written to the memberships on every sign-in.

DECISIONBOARD_OIDC_ROLES maps a group to roles in projects. The mapping governs the projects it
names: there, a member holds the highest role their groups give, and a member none of whose
groups gives a role there is removed. Projects it does not name are left to their admins.
A change that would leave a project without an admin (records.member_changes refuses it) is not
made: the last admin stays an admin until another member is one. Each change made is an audit
entry (records.store.audit_trail), by "single sign-on", from the address of the browser signing
in.
"""

from __future__ import annotations

import logging

from django.db import transaction

from records import member_changes
from records.member_changes import MemberChangeRefused
from records.models import AuditEntry, Membership, Project, Role
from records.store import audit_trail

log = logging.getLogger(__name__)


def groups_in(claims: dict, claim: str) -> list[str]:
    """The claim's groups: a list of strings, or one string (some providers send one group
    bare)."""
    value = claims.get(claim)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [item for item in value if isinstance(item, str)]
    return []


def roles_given(groups: list[str], mapping: dict[str, dict[str, str]]) -> dict[str, Role]:
    """project name -> the highest role any of `groups` gives there."""
    given: dict[str, Role] = {}
    for group in groups:
        for project, role in mapping.get(group, {}).items():
            held = given.get(project)
            if held is None or not held.covers(role):
                given[project] = Role(role)
    return given


def sign_in_actor(request=None) -> audit_trail.Actor:
    """Who the audit log says changed a membership at a sign-in: the single sign-on's mapping,
    applied from the address of the browser signing in."""
    address = audit_trail.client_address(request) if request is not None else None
    return audit_trail.Actor(AuditEntry.ActorKind.SYSTEM, "single sign-on", address=address)


def sync_memberships(
    user,
    groups: list[str],
    mapping: dict[str, dict[str, str]],
    *,
    actor: audit_trail.Actor | None = None,
) -> None:
    actor = actor or sign_in_actor()
    governed = {project for projects in mapping.values() for project in projects}
    if not governed:
        return
    given = roles_given(groups, mapping)
    with transaction.atomic():
        held = dict(
            Membership.objects.filter(user=user, project__name__in=governed).values_list(
                "project__name", "role"
            )
        )
        for project in Project.objects.filter(name__in=governed).order_by("pk"):
            role = given.get(project.name)
            if held.get(project.name) == role:
                continue
            try:
                with transaction.atomic():
                    before = audit_trail.member_snapshot(project, user)
                    if role is None:
                        member_changes.remove_member(project, user)
                    else:
                        member_changes.change_role(project, user, role)
                    audit_trail.record_member(project, user, before, actor=actor)
            except MemberChangeRefused as refused:
                log.warning("single sign-on kept a role: %s", refused)

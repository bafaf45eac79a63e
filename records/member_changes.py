"""Every change of a project's members, one function each and each one transaction: inviting an
e-mail address, accepting an invitation, giving or changing a role, removing a member, revoking
an invitation (docs/access.md).

Each locks the project's row first (FOR NO KEY UPDATE, which ingest's FOR KEY SHARE on the same
row does not wait for), so the changes of one project's members run one at a time: the rule that
a project keeps an admin (`keeps_an_admin`, its one place) is then judged on what the change
before it committed, and two admins demoting each other at once cannot both pass.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from records.models import Invitation, Membership, Project, Role


class MemberChangeRefused(Exception):
    """A change the rules refuse; the message says why, for the page."""


class InvitationUnusable(MemberChangeRefused):
    """The link's invitation does not exist or no longer works (`reason`, None when unknown)."""

    def __init__(self, reason: Invitation.Unusable | None):
        self.reason = reason
        super().__init__(
            reason.label
            if reason is not None
            else "This invitation link is not valid: it may be mistyped or cut short."
        )


def _lock(project: Project) -> None:
    Project.objects.select_for_update(no_key=True).filter(pk=project.pk).first()


def keeps_an_admin(roles_before: Iterable[str], roles_after: Iterable[str]) -> bool:
    """The rule: a project with an admin keeps one, so that somebody other than a superuser can
    still give roles. Over the members' roles before a change and after it."""
    return Role.ADMIN not in set(roles_before) or Role.ADMIN in set(roles_after)


def _keep_an_admin(project: Project, user, role: str | None) -> None:
    """Refuse giving `user` the role `role` (None: removing them) when that breaks
    `keeps_an_admin`. Call with the project locked."""
    before = dict(project.memberships.values_list("user_id", "role"))
    after = {**before, user.pk: role}
    if not keeps_an_admin(before.values(), [r for r in after.values() if r is not None]):
        raise MemberChangeRefused(f"{user.get_username()} is the last admin of {project.name}.")


def invite(
    project: Project,
    email: str,
    role: str,
    invited_by,
    deliver: Callable[[Invitation, str], None],
    now: datetime | None = None,
) -> Invitation:
    """Invite `email` into `project` as `role`, replacing the address's open invitation, and
    hand the invitation with its token to `deliver` (which mails the link) before committing:
    when the mail cannot be sent, no invitation is left whose link nobody has."""
    now = now or timezone.now()
    email = email.strip().lower()
    with transaction.atomic():
        _lock(project)
        if project.memberships.filter(user__email__iexact=email).exists():
            raise MemberChangeRefused(f"{email} is already a member of {project.name}.")
        project.invitations.filter(
            email=email, accepted_at__isnull=True, revoked_at__isnull=True
        ).update(revoked_at=now)
        token = secrets.token_urlsafe(32)
        invitation = Invitation.objects.create(
            project=project,
            email=email,
            role=Role(role),
            token_hash=Invitation.hash_token(token),
            invited_by=invited_by,
            created_at=now,
            expires_at=now + timedelta(days=settings.DECISIONBOARD["INVITATION_DAYS"]),
        )
        deliver(invitation, token)
    return invitation


def accept(token: str, user, now: datetime | None = None) -> Membership:
    """Make `user` a member with the role the token's invitation gives, and use the invitation
    up. Refused when the link does not work (InvitationUnusable), when the account's address is
    not the invited one, or when the user is a member already (an invitation never changes a
    role)."""
    now = now or timezone.now()
    with transaction.atomic():
        found = Invitation.find(token)
        if found is None:
            raise InvitationUnusable(None)
        project = found.project
        _lock(project)
        invitation = Invitation.objects.select_for_update().filter(pk=found.pk).first()
        if invitation is None:  # its project was deleted meanwhile
            raise InvitationUnusable(None)
        reason = invitation.unusable(now)
        if reason is not None:
            raise InvitationUnusable(reason)
        if not invitation.is_for(user):
            raise MemberChangeRefused(
                f"This invitation is for {invitation.email}, and you are logged in as "
                f"{user.get_username()}: log out, then follow the link again."
            )
        if project.memberships.filter(user=user).exists():
            raise MemberChangeRefused(f"You are already a member of {project.name}.")
        membership = Membership.objects.create(user=user, project=project, role=invitation.role)
        invitation.accepted_at, invitation.accepted_by = now, user
        invitation.save(update_fields=["accepted_at", "accepted_by"])
    return membership


def change_role(project: Project, user, role: str) -> Membership:
    """Give `user` the role `role` in `project`, making them a member when they are not one."""
    with transaction.atomic():
        _lock(project)
        _keep_an_admin(project, user, role)
        membership, _ = Membership.objects.update_or_create(
            user=user, project=project, defaults={"role": Role(role)}
        )
    return membership


def remove_member(project: Project, user) -> None:
    """Take `user` out of `project` (leaving it, when they remove themselves)."""
    with transaction.atomic():
        _lock(project)
        _keep_an_admin(project, user, None)
        project.memberships.filter(user=user).delete()


def revoke_invitation(invitation: Invitation, now: datetime | None = None) -> None:
    """Withdraw an invitation: its link stops working. One accepted already is refused."""
    now = now or timezone.now()
    with transaction.atomic():
        _lock(invitation.project)
        current = Invitation.objects.select_for_update().get(pk=invitation.pk)
        if current.accepted_at is not None:
            raise MemberChangeRefused(f"{current.email} has already accepted the invitation.")
        if current.revoked_at is None:
            current.revoked_at = now
            current.save(update_fields=["revoked_at"])

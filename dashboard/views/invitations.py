"""The page an invitation's link opens (docs/access.md). Its visitor is not a member yet, so no
role governs it (config.roles.OPEN): the link's token is what admits them, once.

A logged-in account with the invited address joins with a button (a POST: mail scanners that
fetch links must not use one up); someone not logged in logs in to their account with that
address (or signs in with single sign-on), or, when none has it and password login is on,
creates one with a password and joins in the same step. A link
that does not work answers a page saying why, with a 4xx: 404 for a token no invitation has,
410 for an expired, revoked, replaced or used one, 403 for another account, 409 for a member.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model, login
from django.contrib.auth.forms import UserCreationForm
from django.contrib.auth.views import redirect_to_login
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from dashboard.web.access import SESSION_PROJECT
from records import member_changes
from records.member_changes import InvitationUnusable, MemberChangeRefused
from records.models import AuditEntry, Invitation
from records.store import audit_trail

# The account made here has a password, so it logs in through Django's own backend.
PASSWORD_BACKEND = "django.contrib.auth.backends.ModelBackend"


class AccountForm(UserCreationForm):
    """A new account for the invited address: a user name and a password, twice."""


def _refused(request: HttpRequest, status: int, reason: str) -> HttpResponse:
    return render(request, "dashboard/invitation.html", {"refusal": reason}, status=status)


def _status_of(exc: MemberChangeRefused) -> int:
    if isinstance(exc, InvitationUnusable):
        return 404 if exc.reason is None else 410
    return 409


def _joined(request: HttpRequest, token: str, user) -> HttpResponse:
    actor = audit_trail.Actor(
        AuditEntry.ActorKind.USER,
        user.get_username(),
        user_id=user.pk,
        address=audit_trail.client_address(request),
    )
    try:
        with transaction.atomic():
            membership = member_changes.accept(token, user)
            audit_trail.record_member(membership.project, user, None, actor=actor)
    except MemberChangeRefused as exc:
        return _refused(request, _status_of(exc), str(exc))
    request.session[SESSION_PROJECT] = membership.project_id
    messages.success(
        request,
        f"You joined {membership.project.name} as {membership.get_role_display()}.",
    )
    return redirect(f"/project/?project={membership.project.name}")


def accept_invitation(request: HttpRequest, token: str) -> HttpResponse:
    invitation = Invitation.find(token)
    if invitation is None:
        return _refused(request, 404, str(InvitationUnusable(None)))
    reason = invitation.unusable(timezone.now())
    if reason is not None:
        return _refused(request, 410, reason.label)
    context = {"invitation": invitation, "project": invitation.project}
    if request.user.is_authenticated:
        if not invitation.is_for(request.user):
            return _refused(
                request,
                403,
                f"This invitation is for {invitation.email}, and you are logged in as "
                f"{request.user.get_username()}: log out, then follow the link again.",
            )
        if request.method == "POST":
            return _joined(request, token, request.user)
        return render(request, "dashboard/invitation.html", context)
    # With password login off (single sign-on only), an account is made by signing in, never
    # here with a password.
    sign_on_only = not settings.OIDC.password_login
    if sign_on_only or get_user_model().objects.filter(email__iexact=invitation.email).exists():
        if request.method == "POST":
            return redirect_to_login(request.get_full_path())
        log_in = {"log_in": True, "sign_on_only": sign_on_only}
        return render(request, "dashboard/invitation.html", {**context, **log_in})
    form = AccountForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            # The account is made only if the invitation is accepted: a link that stopped
            # working meanwhile leaves nothing behind.
            user = form.save(commit=False)
            user.email = invitation.email
            user.save()
            response = _joined(request, token, user)
            if response.status_code != 302:
                transaction.set_rollback(True)
                return response
        login(request, user, backend=PASSWORD_BACKEND)
        request.session[SESSION_PROJECT] = invitation.project_id
        return response
    return render(request, "dashboard/invitation.html", {**context, "form": form})

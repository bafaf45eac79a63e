"""The project page (its members and their roles, its open invitations, its retention; an admin
changes them there, and invites by e-mail) and the header's project switcher: POST a project
name, land on the same page of that project."""

from __future__ import annotations

from urllib.parse import urlsplit

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import Resolver404, resolve, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from dashboard.web.access import (
    SESSION_PROJECT,
    get_project_for_user,
    operator_projects,
    role_required,
)
from records import member_changes
from records.member_changes import MemberChangeRefused
from records.models import Invitation, Project, Role
from records.store import audit_trail, retention

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


@role_required
@require_POST
def switch_project(request: HttpRequest) -> HttpResponse:
    name = request.POST.get("project", "")
    project = next((p for p in operator_projects(request) if p.name == name), None)
    if project is None:
        raise Http404("No such project.")
    request.session[SESSION_PROJECT] = project.pk
    return redirect(_landing(request))


class MemberForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=[*Role.choices, ("", "not a member")], required=False)

    def clean_username(self) -> object:
        user = get_user_model().objects.filter(username=self.cleaned_data["username"]).first()
        if user is None:
            raise forms.ValidationError("No such user: they log in once an account exists.")
        return user


class SettingsForm(forms.ModelForm):
    class Meta:
        model = Project
        fields = ["retention_days"]


@role_required
def project_page(request: HttpRequest) -> HttpResponse:
    project = get_project_for_user(request)
    members = project.memberships.select_related("user").order_by("user__username")
    is_admin = project.role_of(request.user) == Role.ADMIN
    return render(
        request,
        "dashboard/project.html",
        {
            "project": project,
            "members": members,
            "retention_days": retention.project_days(project),
            "roles": Role.choices,
            "is_admin": is_admin,
            "settings_form": SettingsForm(instance=project),
            # Open invitations name addresses: the admins', who may revoke them, alone.
            "invitations": list(Invitation.open_in(project)) if is_admin else [],
            "invitation_days": settings.DECISIONBOARD["INVITATION_DAYS"],
        },
    )


def _administered(request: HttpRequest) -> Project:
    """The project a change posts, which config.roles has checked the operator admins."""
    name = request.POST.get("project", "")
    project = Project.objects.for_user(request.user, Role.ADMIN).filter(name=name).first()
    if project is None:
        raise Http404("No such project.")
    return project


def _back_to(project: Project) -> HttpResponse:
    return redirect(f"/project/?project={project.name}")


@role_required
@require_POST
def project_member(request: HttpRequest) -> HttpResponse:
    project = _administered(request)
    form = MemberForm(request.POST)
    if not form.is_valid():
        for errors in form.errors.values():
            messages.error(request, " ".join(errors))
        return _back_to(project)
    user, role = form.cleaned_data["username"], form.cleaned_data["role"] or None
    try:
        with transaction.atomic():
            before = audit_trail.member_snapshot(project, user)
            if role:
                member_changes.change_role(project, user, role)
            else:
                member_changes.remove_member(project, user)
            audit_trail.record_member(project, user, before, actor=audit_trail.actor_of(request))
    except MemberChangeRefused as exc:
        messages.error(request, f"{exc} Make another member an admin first.")
    else:
        done = f"is now {Role(role).with_article}" if role else "was removed"
        messages.success(request, f"{user.get_username()} {done} in {project.name}.")
    return _back_to(project)


@role_required
@require_POST
def project_settings(request: HttpRequest) -> HttpResponse:
    project = _administered(request)
    before = audit_trail.snapshot(project)
    form = SettingsForm(request.POST, instance=project)
    if form.is_valid():
        with transaction.atomic():
            form.save()
            audit_trail.record_change(
                "update", project, actor=audit_trail.actor_of(request), before=before
            )
        messages.success(request, f"Saved the settings of {project.name}.")
    else:
        for errors in form.errors.values():
            messages.error(request, " ".join(errors))
    return _back_to(project)


class InvitationForm(forms.Form):
    email = forms.EmailField()
    role = forms.ChoiceField(choices=Role.choices)


def _record_invitation(action: str, invitation: Invitation, request, after: dict) -> None:
    audit_trail.record(
        invitation.project,
        action,
        "invitation",
        actor=audit_trail.actor_of(request),
        object_id=invitation.pk,
        object_name=invitation.email,
        after=after,
    )


def _mail_invitation(invitation: Invitation, token: str) -> None:
    link = settings.SITE_URL.rstrip("/") + reverse("dash-invitation-accept", args=[token])
    context = {
        "invitation": invitation,
        "link": link,
        "inviter": invitation.invited_by.get_username() if invitation.invited_by else "An admin",
    }
    send_mail(
        f"You are invited to {invitation.project.name} on Decisionboard",
        render_to_string("dashboard/invitation_mail.txt", context),
        None,
        [invitation.email],
    )


@role_required
@require_POST
def project_invite(request: HttpRequest) -> HttpResponse:
    project = _administered(request)
    form = InvitationForm(request.POST)
    if not form.is_valid():
        for errors in form.errors.values():
            messages.error(request, " ".join(errors))
        return _back_to(project)
    email, role = form.cleaned_data["email"], form.cleaned_data["role"]
    try:
        with transaction.atomic():
            invitation = member_changes.invite(project, email, role, request.user, _mail_invitation)
            _record_invitation("invite", invitation, request, after={"role": invitation.role})
    except MemberChangeRefused as exc:
        messages.error(request, str(exc))
    except OSError as exc:  # the mail server refused or could not be reached (SMTPException too)
        messages.error(request, f"The invitation could not be mailed, so none was made: {exc}")
    else:
        days = settings.DECISIONBOARD["INVITATION_DAYS"]
        messages.success(
            request,
            f"Invited {invitation.email} as {Role(invitation.role).with_article}: the link in "
            f"the mail works once, for {days} day{'s' if days != 1 else ''}.",
        )
    return _back_to(project)


@role_required
@require_POST
def invitation_revoke(request: HttpRequest, invitation_id: int) -> HttpResponse:
    administered = Project.objects.for_user(request.user, Role.ADMIN)
    invitation = (
        Invitation.objects.select_related("project")
        .filter(pk=invitation_id, project__in=administered)
        .first()
    )
    if invitation is None:
        raise Http404("No such invitation.")
    try:
        with transaction.atomic():
            member_changes.revoke_invitation(invitation)
            _record_invitation("revoke", invitation, request, after={"revoked": True})
    except MemberChangeRefused as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Revoked the invitation of {invitation.email}.")
    return _back_to(invitation.project)

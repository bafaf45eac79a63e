"""API keys of the operator's projects: create one (its secret shown once, with
its scope), list them with when each was last used, revoke one. A key is stored hashed
(records.models.ApiKey), so the page can show the secret only in the answer to its creation.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from dashboard.web.access import get_project_for_user, may, operator_projects, role_required
from records.models import ApiKey, Role
from records.store import audit_trail

# The session slot holding a new key's secret until the page after the POST has shown it once.
SESSION_NEW_KEY = "dashboard.new_key"


class KeyForm(forms.Form):
    project = forms.ChoiceField()
    name = forms.CharField(
        max_length=100, required=False, help_text="To recognise the key, e.g. the agent's name."
    )
    scope = forms.ChoiceField(
        choices=ApiKey.Scope.choices,
        initial=ApiKey.Scope.INGEST,
        help_text="ingest: post records; read: the read API; all: both.",
    )

    def __init__(self, *args, projects, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.projects = {p.name: p for p in projects}
        self.fields["project"].choices = [(name, name) for name in self.projects]


def _get_key_for_user(request: HttpRequest, key_id: int) -> ApiKey:
    key = (
        ApiKey.objects.filter(pk=key_id, project__in=[p.pk for p in operator_projects(request)])
        .select_related("project")
        .first()
    )
    if key is None:
        raise Http404("No such key.")
    return key


@role_required
def keys_page(request: HttpRequest) -> HttpResponse:
    current = get_project_for_user(request)
    projects = operator_projects(request)
    # Keys are minted and revoked by a project's admins (config.roles); the others see the list.
    administered = [p for p in projects if may(request, p.pk, Role.ADMIN)]
    form = KeyForm(request.POST or None, projects=administered, initial={"project": current.name})
    if request.method == "POST" and form.is_valid():
        project = form.projects[form.cleaned_data["project"]]
        with transaction.atomic():
            key, raw = ApiKey.issue(project, form.cleaned_data["scope"], form.cleaned_data["name"])
            audit_trail.record_change("mint", key, actor=audit_trail.actor_of(request), before=None)
        # Shown by the next page (a reload of which must not create another key), then gone.
        request.session[SESSION_NEW_KEY] = {"id": key.pk, "raw": raw}
        return redirect("dash-keys")
    new = request.session.pop(SESSION_NEW_KEY, None)
    keys = list(
        ApiKey.objects.filter(project__in=[p.pk for p in projects])
        .select_related("project")
        .order_by("revoked_at", "project__name", "-created_at")
    )
    created = next((k for k in keys if new and k.pk == new["id"]), None)
    for key in keys:
        key.revocable = key.is_active and key.project in administered
    return render(
        request,
        "dashboard/keys.html",
        {
            "project": current,
            "form": form if administered else None,
            "keys": keys,
            "created": created,
            "created_raw": new["raw"] if created else "",
        },
        status=400 if form.errors else 200,
    )


@role_required
@require_POST
def key_revoke(request: HttpRequest, key_id: int) -> HttpResponse:
    key = _get_key_for_user(request, key_id)
    with transaction.atomic():
        before = audit_trail.snapshot(key)
        key.revoke()
        audit_trail.record_change("update", key, actor=audit_trail.actor_of(request), before=before)
    messages.success(
        request, f"Revoked {key.prefix}… ({key.project.name}): it is refused from now."
    )
    return redirect("dash-keys")

"""The records app's admin; every change made here is an audit entry (AuditedAdmin)."""

from __future__ import annotations

from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db import transaction
from django.forms.models import BaseInlineFormSet

from records import member_changes
from records.models import ApiKey, Membership, Project, RedactionPolicy, RedactionRule
from records.store import audit_trail


class AuditedAdmin(admin.ModelAdmin):
    """An admin whose changes, its inlines' included, are audit entries
    (records.store.audit_trail), each in the transaction of its change. The admin's add and
    change views run in one transaction already; the bulk delete action does not, so it opens
    one."""

    def save_model(self, request, obj, form, change) -> None:
        stored = type(obj).objects.filter(pk=obj.pk).first() if change else None
        # Recorded by save_related, once the many-to-many fields (a rule's channels) are saved.
        request.audit_before = audit_trail.snapshot(stored) if stored is not None else None
        super().save_model(request, obj, form, change)

    def save_related(self, request, form, formsets, change) -> None:
        super().save_related(request, form, formsets, change)
        before = getattr(request, "audit_before", None)
        audit_trail.record_change(
            "update" if before is not None else "create",
            form.instance,
            actor=audit_trail.actor_of(request),
            before=before,
        )

    def save_formset(self, request, form, formset, change) -> None:
        if formset.model._meta.label_lower not in audit_trail.AUDITED:
            super().save_formset(request, form, formset, change)
            return
        actor = audit_trail.actor_of(request)
        with transaction.atomic():
            ids = [f.instance.pk for f in formset.initial_forms if f.instance.pk is not None]
            stored = {o.pk: o for o in formset.model.objects.filter(pk__in=ids)}
            befores = {pk: audit_trail.snapshot(o) for pk, o in stored.items()}
            super().save_formset(request, form, formset, change)
            kept = set(formset.model.objects.filter(pk__in=ids).values_list("pk", flat=True))
            for pk, obj in stored.items():
                if pk not in kept:
                    audit_trail.record_deletion(obj, actor=actor)
            for obj in formset.changed_objects or ():
                changed = obj[0] if isinstance(obj, tuple) else obj
                audit_trail.record_change(
                    "update", changed, actor=actor, before=befores.get(changed.pk)
                )
            for obj in formset.new_objects or ():
                audit_trail.record_change("create", obj, actor=actor, before=None)

    def delete_model(self, request, obj) -> None:
        with transaction.atomic():
            audit_trail.record_deletion(obj, actor=audit_trail.actor_of(request))
            super().delete_model(request, obj)

    def delete_queryset(self, request, queryset) -> None:
        actor = audit_trail.actor_of(request)
        with transaction.atomic():
            for obj in queryset:
                audit_trail.record_deletion(obj, actor=actor)
            super().delete_queryset(request, queryset)


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    extra = 0
    fields = ("name", "prefix", "scope", "rate_limit", "created_at", "revoked_at")
    readonly_fields = ("prefix", "created_at")
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        # A key's secret is shown once, by `manage.py create_api_key`; the admin cannot show it.
        return False


class MembershipFormSet(BaseInlineFormSet):
    """Refuses a save that would leave the project without an admin (records.member_changes'
    rule), before anything is written."""

    def clean(self) -> None:
        super().clean()
        if self.instance.pk is None:
            return
        before = self.instance.memberships.values_list("role", flat=True)
        after = [
            form.cleaned_data["role"]
            for form in self.forms
            if form.cleaned_data.get("user") and not form.cleaned_data.get("DELETE")
        ]
        if not member_changes.keeps_an_admin(before, after):
            raise ValidationError(
                f"{self.instance.name} keeps at least one admin: make another member an admin "
                "first."
            )


class MembershipInline(admin.TabularInline):
    """Who may see the project, and their role in it (viewer, editor, admin). Saved through
    records.member_changes, as the Project page's changes are."""

    model = Membership
    formset = MembershipFormSet
    extra = 0
    fields = ("user", "role")
    autocomplete_fields = ("user",)


class RedactionPolicyInline(admin.StackedInline):
    """The built-in detectors; without a row the project has the defaults (secrets and cards
    on, personal data off), which a saved row starts from too."""

    model = RedactionPolicy
    max_num = 1
    can_delete = False
    fields = ("secrets", "cards", "emails", "phones", "ibans")


class RedactionRuleInline(admin.TabularInline):
    model = RedactionRule
    extra = 0
    fields = ("kind", "name", "value")


@admin.register(Project)
class ProjectAdmin(AuditedAdmin):
    list_display = ("name", "retention_days", "created_at")
    search_fields = ("name",)
    inlines = [MembershipInline, ApiKeyInline, RedactionPolicyInline, RedactionRuleInline]


@admin.register(ApiKey)
class ApiKeyAdmin(AuditedAdmin):
    list_display = (
        "prefix", "project", "name", "scope", "created_at", "last_used_at", "revoked_at"
    )  # fmt: skip
    list_filter = ("scope", "project")
    readonly_fields = ("prefix", "key_hash", "created_at", "last_used_at")
    search_fields = ("prefix", "name", "project__name")

    def has_add_permission(self, request) -> bool:
        # A key's secret is shown once, on the Keys page (/keys/) or by create_api_key.
        return False


@admin.register(RedactionRule)
class RedactionRuleAdmin(AuditedAdmin):
    """A project's own patterns and JSON keys; a pattern RE2 cannot run is refused on save."""

    list_display = ("project", "kind", "name", "value", "created_at")
    list_filter = ("kind", "project")
    search_fields = ("project__name", "name", "value")

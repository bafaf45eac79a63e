from __future__ import annotations

from django.contrib import admin

from records.models import ApiKey, Project


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    extra = 0
    fields = ("name", "prefix", "scope", "rate_limit", "created_at", "revoked_at")
    readonly_fields = ("prefix", "created_at")
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        # A key's secret is shown once, by `manage.py create_api_key`; the admin cannot show it.
        return False


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ("name", "retention_days", "created_at")
    search_fields = ("name",)
    inlines = [ApiKeyInline]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = (
        "prefix", "project", "name", "scope", "created_at", "last_used_at", "revoked_at"
    )  # fmt: skip
    list_filter = ("scope", "project")
    readonly_fields = ("prefix", "key_hash", "created_at", "last_used_at")
    search_fields = ("prefix", "name", "project__name")

    def has_add_permission(self, request) -> bool:
        # A key's secret is shown once, on the Keys page (/keys/) or by create_api_key.
        return False

"""The admin of price overrides: beside the API that manages the same rows, and like it
re-pricing the records a change touches (api.price_overrides.reprice_from), and like it
recording each change in the audit log (records.admin.AuditedAdmin)."""

from __future__ import annotations

from django.contrib import admin
from django.db import transaction

from api.price_overrides import reprice_from
from records.admin import AuditedAdmin
from records.models import PriceOverride


@admin.register(PriceOverride)
class PriceOverrideAdmin(AuditedAdmin):
    list_display = (
        "model", "provider", "project", "effective_from", "input_per_mtok", "output_per_mtok",
        "cache_read_per_mtok", "cache_write_per_mtok",
    )  # fmt: skip
    list_filter = ("project",)
    search_fields = ("model", "provider", "project__name")
    readonly_fields = ("currency", "created_at")

    def save_model(self, request, obj, form, change) -> None:
        with transaction.atomic():
            if change:
                before = PriceOverride.objects.get(pk=obj.pk)
                reprice_from(before, before.effective_from)
            super().save_model(request, obj, form, change)
            reprice_from(obj, obj.effective_from)

    def delete_model(self, request, obj) -> None:
        with transaction.atomic():
            super().delete_model(request, obj)
            reprice_from(obj, obj.effective_from)

    def delete_queryset(self, request, queryset) -> None:
        with transaction.atomic():
            gone = list(queryset)
            super().delete_queryset(request, queryset)
            for obj in gone:
                reprice_from(obj, obj.effective_from)

"""/api/v1/price-overrides (CRUD): a project's own price of a model, from a date (docs/api.md,
"Price overrides").

Reading takes a read key or an operator's session; changing takes a key with the `all` scope or
an editor's or admin's session, as alert rules do. Every change re-prices the records of that
model already stored from the earliest date it touches (workers.tasks.enqueue_reprice).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import extend_schema_view
from rest_framework import serializers
from rest_framework.exceptions import ValidationError

from api.access import RoleRequired
from api.alerts import CanManageAlerts, ProjectItemViewSet, list_schema, value_after_write
from api.bodies import RejectUnknownFields
from records.models import CURRENCY, PriceOverride
from records.store import audit_trail
from workers.tasks import enqueue_reprice

# A price above this per million tokens is a typo (a price per token, or cents), not a rate.
MAX_PRICE_PER_MTOK = Decimal(100_000)


class PriceField(serializers.DecimalField):
    def __init__(self, **kwargs) -> None:
        super().__init__(
            max_digits=14,
            decimal_places=6,
            min_value=Decimal(0),
            max_value=MAX_PRICE_PER_MTOK,
            coerce_to_string=False,
            **kwargs,
        )


class PriceOverrideSerializer(RejectUnknownFields, serializers.ModelSerializer):
    project = serializers.CharField(source="project.name", read_only=True)
    currency = serializers.CharField(
        default=CURRENCY, help_text=f"Prices are kept in {CURRENCY}; another currency is a 400."
    )
    input_per_mtok = PriceField(help_text="USD per million input tokens (not cached).")
    output_per_mtok = PriceField(help_text="USD per million output tokens (reasoning included).")
    cache_read_per_mtok = PriceField(
        required=False, allow_null=True, help_text="USD per million cached input tokens read; "
        "the input price when left out."
    )  # fmt: skip
    cache_write_per_mtok = PriceField(
        required=False, allow_null=True, help_text="USD per million input tokens written to the "
        "cache; the input price when left out."
    )  # fmt: skip

    class Meta:
        model = PriceOverride
        fields = [
            "id",
            "project",
            "model",
            "provider",
            "effective_from",
            "currency",
            "input_per_mtok",
            "output_per_mtok",
            "cache_read_per_mtok",
            "cache_write_per_mtok",
            "created_at",
        ]
        read_only_fields = ["created_at"]
        # The unique constraint includes the project, which the body does not carry:
        # `validate` checks it instead.
        validators: list = []

    def validate_currency(self, value: str) -> str:
        if value.upper() != CURRENCY:
            raise ValidationError(f"unknown currency {value!r}; prices are kept in {CURRENCY}")
        return CURRENCY

    def validate(self, attrs: dict) -> dict:
        project = self.context["project"]
        clash = PriceOverride.objects.filter(
            project=project,
            model=value_after_write(self, attrs, "model"),
            provider=value_after_write(self, attrs, "provider") or "",
            effective_from=value_after_write(self, attrs, "effective_from")
            or attrs.setdefault("effective_from", timezone.now()),
        )
        if self.instance is not None:
            clash = clash.exclude(pk=self.instance.pk)
        if clash.exists():
            raise ValidationError(
                {"effective_from": ["this model already has a price from this moment"]}
            )
        return attrs


class CanManagePrices(CanManageAlerts):
    write_message = "Changing prices needs an API key with the `all` scope."


@extend_schema_view(
    **list_schema(
        "List the project's price overrides",
        "PriceOverridePage",
        PriceOverrideSerializer,
        "price_overrides_list",
    )
)
class PriceOverrideViewSet(ProjectItemViewSet):
    serializer_class = PriceOverrideSerializer
    permission_classes = [CanManagePrices, RoleRequired]

    def items(self) -> QuerySet:
        return PriceOverride.objects.select_related("project")

    def perform_create(self, serializer) -> None:
        with transaction.atomic():
            override = serializer.save(project=serializer.context["project"])
            audit_trail.record_change(
                "create", override, actor=audit_trail.actor_of(self.request), before=None
            )
            reprice_from(override, override.effective_from)

    def perform_update(self, serializer) -> None:
        before = self.get_object()
        with transaction.atomic():
            was = audit_trail.snapshot(before)
            override = serializer.save()
            audit_trail.record_change(
                "update", override, actor=audit_trail.actor_of(self.request), before=was
            )
            # The old model (and date) lose this price, the new ones gain it.
            reprice_from(before, before.effective_from)
            if (override.model, override.provider) != (before.model, before.provider) or (
                override.effective_from != before.effective_from
            ):
                reprice_from(override, override.effective_from)

    def perform_destroy(self, instance: PriceOverride) -> None:
        with transaction.atomic():
            audit_trail.record_deletion(instance, actor=audit_trail.actor_of(self.request))
            instance.delete()
            reprice_from(instance, instance.effective_from)


def reprice_from(override: PriceOverride, since: datetime) -> None:
    enqueue_reprice(override.project_id, override.model, override.provider, since)

"""A project's own price of a model: negotiated rates and private deployments."""

from __future__ import annotations

from decimal import Decimal

from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

from records.models.tenancy import Project

# The one currency prices are kept in: genai-prices' and every cost the pages sum.
CURRENCY = "USD"


def _price_field(**kwargs) -> models.DecimalField:
    return models.DecimalField(
        max_digits=14,
        decimal_places=6,
        validators=[MinValueValidator(Decimal(0))],
        help_text="USD per million tokens.",
        **kwargs,
    )


class PriceOverride(models.Model):
    """The price of `model` (from `provider`, or any provider when blank) for one project from
    `effective_from` on, in USD per million tokens. It wins over genai-prices' price for the
    records of that model from then (records.contract.cost.price); a change re-prices the
    records already stored from that date (records.catchup.reprice)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="price_overrides")
    model = models.CharField(max_length=200)
    provider = models.CharField(max_length=200, blank=True, default="")
    effective_from = models.DateTimeField(default=timezone.now)
    currency = models.CharField(max_length=3, default=CURRENCY, editable=False)
    input_per_mtok = _price_field()
    output_per_mtok = _price_field()
    cache_read_per_mtok = _price_field(null=True, blank=True)
    cache_write_per_mtok = _price_field(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "model", "provider", "effective_from"],
                name="price_override_unique",
            )
        ]

    def __str__(self) -> str:
        where = f" ({self.provider})" if self.provider else ""
        return f"{self.model}{where} from {self.effective_from:%Y-%m-%d %H:%M}"

"""Ingest's pricing step: each record with usage gets its cost columns (records.contract.cost)."""

from __future__ import annotations

from collections.abc import Sequence

from records.contract.cost import Override, price
from records.contract.normalise import NormalisedRecord
from records.models import PriceOverride


def project_overrides(project_id: int) -> list[Override]:
    """The project's price overrides, every model and date: few rows, one query."""
    return [as_override(o) for o in PriceOverride.objects.filter(project_id=project_id)]


def as_override(row: PriceOverride) -> Override:
    return Override(
        model=row.model,
        provider=row.provider,
        effective_from=row.effective_from,
        input_per_mtok=row.input_per_mtok,
        output_per_mtok=row.output_per_mtok,
        cache_read_per_mtok=row.cache_read_per_mtok,
        cache_write_per_mtok=row.cache_write_per_mtok,
    )


def price_records(project_id: int, records: Sequence[NormalisedRecord]) -> None:
    """Set cost_nano and cost_source on the records that carry usage; the overrides are read
    only when a record has usage and no reported cost."""
    overrides: list[Override] | None = None
    for record in records:
        usage = record.usage
        if usage is None:
            continue
        if overrides is None and usage.reported_usd is None:
            overrides = project_overrides(project_id)
        cost = price(usage, record.ts, overrides or ())
        record.cost_nano, record.cost_source = cost.nano, cost.source

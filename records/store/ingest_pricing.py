"""Ingest's pricing step: each record with usage gets its cost columns (records.contract.cost)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from time import monotonic

from django.conf import settings
from genai_prices import UpdatePrices

from records.contract.cost import Override, price
from records.contract.normalise import NormalisedRecord
from records.models import PriceOverride

# project id -> (monotonic time they were read, its overrides); entries are replaced whole,
# never mutated in place, so the threads of a process can share it.
_overrides: dict[int, tuple[float, list[Override]]] = {}
# Past this many projects the cache starts over rather than grow with every project seen.
_OVERRIDES_MAX = 1_000


def project_overrides(project_id: int) -> list[Override]:
    """The project's price overrides, every model and date (few rows, one query), from this
    process's cache when they were read less than PRICE_OVERRIDE_CACHE_SECONDS ago: a batch of
    model calls would otherwise pay a query for a table that changes a few times a year."""
    ttl = settings.DECISIONBOARD["PRICE_OVERRIDE_CACHE_SECONDS"]
    now = monotonic()
    cached = _overrides.get(project_id)
    if cached is not None and now - cached[0] < ttl:
        return cached[1]
    found = [as_override(o) for o in PriceOverride.objects.filter(project_id=project_id)]
    if ttl > 0:
        if len(_overrides) >= _OVERRIDES_MAX:
            _overrides.clear()
        _overrides[project_id] = (now, found)
    return found


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
    keep_prices_fresh()
    overrides: list[Override] | None = None
    for record in records:
        usage = record.usage
        if usage is None:
            continue
        if overrides is None and usage.reported_usd is None:
            overrides = project_overrides(project_id)
        cost = price(usage, record.ts, overrides or ())
        record.cost_nano, record.cost_source = cost.nano, cost.source


# The fetcher of this process, with the process it was started in (a forked child starts its own).
_FETCHER: dict[int, UpdatePrices] = {}


def keep_prices_fresh() -> None:
    """With DECISIONBOARD_PRICES_UPDATE on, fetch newer prices in the background of this
    process (genai-prices' own thread, hourly); a failed fetch keeps the prices in use. Started
    on first use, after a server forked its workers, so each process runs its own thread."""
    options = settings.DECISIONBOARD
    if not options["PRICES_UPDATE"] or os.getpid() in _FETCHER:
        return
    fetcher = _FETCHER[os.getpid()] = UpdatePrices(url=options["PRICES_UPDATE_URL"])
    fetcher.start()


def stop_fetching_prices() -> None:
    """Stop this process's fetcher, if one runs (the prices it fetched stay in use)."""
    fetcher = _FETCHER.pop(os.getpid(), None)
    if fetcher is not None:
        fetcher.stop()

"""Ingest as a domain function: judge each posted record, store the good ones.

The HTTP view (api.ingest) decodes the body and answers; `seed_demo` and the benchmarks call
the same function, so a record is judged and stored one way whoever sends it. Rejected records
never block their valid neighbours; the valid ones are committed before this returns.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from records.contract.normalise import Errors, Limits, NormalisedRecord, normalise
from records.store.writer import store_records


@dataclass
class IngestResult:
    accepted: int
    duplicates: int
    # {"index", "id", "errors"} of each rejected record, by index (the 207 body).
    rejected: list[dict] = field(default_factory=list)
    # The records that passed and went to the store (new or duplicates), for the counters.
    valid: list[NormalisedRecord] = field(default_factory=list)
    # The new ones by kind (records.store.writer), so that the counters need no query.
    accepted_by_kind: dict[str, int] = field(default_factory=dict)

    def body(self) -> dict:
        return {"accepted": self.accepted, "duplicates": self.duplicates, "rejected": self.rejected}


def configured_limits() -> Limits:
    """The record limits of the settings (DECISIONBOARD MAX_DATA_BYTES, MAX_FUTURE_SECONDS)."""
    options = settings.DECISIONBOARD
    return Limits(
        max_data_bytes=options["MAX_DATA_BYTES"],
        max_future=timedelta(seconds=options["MAX_FUTURE_SECONDS"]),
    )


def ingest(
    project_id: int,
    records: Iterable[tuple[int, Any]],
    *,
    now: datetime,
    limits: Limits | None = None,
    scrub: bool = False,
    unreadable: Iterable[tuple[int, Errors]] = (),
) -> IngestResult:
    """Normalise `records` ((index, raw JSON value) pairs), store the valid ones in one
    transaction, and report the rest with the errors of `unreadable` ones (parts of a body that
    were not even JSON)."""
    limits = limits or configured_limits()
    rejected = [{"index": index, "id": None, "errors": errors} for index, errors in unreadable]
    valid: list[NormalisedRecord] = []
    for index, raw in records:
        result = normalise(raw, now=now, limits=limits, scrub=scrub)
        if isinstance(result, NormalisedRecord):
            valid.append(result)
        else:
            rejected.append({"index": index, "id": posted_id(raw), "errors": result})
    stored = store_records(project_id, valid, now)
    rejected.sort(key=lambda r: r["index"])
    return IngestResult(
        stored.accepted, stored.duplicates, rejected, valid, stored.accepted_by_kind
    )


def posted_id(raw: Any) -> str | None:
    value = raw.get("id") if isinstance(raw, dict) else None
    return value if isinstance(value, str) else None

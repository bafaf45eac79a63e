"""Ingest as a domain function: judge each posted record, store the good ones.

The transports (native JSON, OTLP over HTTP and gRPC) reach the store through one write action,
api.record_writes, which also counts and nudges the workers; `seed_demo`, the benchmarks and the
tests call `ingest` here, the same judging and store without the web's counters. Rejected
records never block their valid neighbours; the valid ones are committed before this returns.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from records.contract.normalise import Errors, Limits, normalise_batch
from records.store.writer import store_records


@dataclass
class IngestResult:
    accepted: int
    duplicates: int
    # {"index", "id", "errors"} of each rejected record, by index (the 207 body).
    rejected: list[dict] = field(default_factory=list)

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
    judged = normalise_batch(records, now=now, limits=limits or configured_limits(), scrub=scrub)
    stored = store_records(project_id, judged.valid, now)
    rejected = rejections(unreadable, judged.rejected)
    return IngestResult(stored.accepted, stored.duplicates, rejected)


def rejections(
    unreadable: Iterable[tuple[int, Errors]], rejected: Iterable[tuple[int, Any, Errors]]
) -> list[dict]:
    """The `rejected` entries of a native answer, by index: the records that could not be read
    at all, and those normalise rejected."""
    out = [{"index": index, "id": None, "errors": errors} for index, errors in unreadable]
    out += [{"index": i, "id": posted_id(raw), "errors": errors} for i, raw, errors in rejected]
    out.sort(key=lambda r: r["index"])
    return out


def posted_id(raw: Any) -> str | None:
    value = raw.get("id") if isinstance(raw, dict) else None
    return value if isinstance(value, str) else None

"""How far the rollups lag the records, in constant time whatever the backlog (DESIGN §9).

The catch-up pass (records.rollup) folds records in id order for every project at once, so its
lag is one figure for the whole installation: a project's charts wait behind every record above
the watermark, whichever project sent it. Everything here comes from indexed lookups that cost
the same on ten records or ten million, with or without planner statistics: the watermark row,
the newest id (max over the primary key) and the oldest pending record (the first id above the
watermark). Counting the pending records exactly would scan them, on every page view, while
the backlog is largest; so the count is the span of ids from the oldest pending record to the
newest, an upper bound (ids used up by duplicate inserts and rolled-back batches count too), and
marked as an estimate when it may be one.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from records.models import Record, Watermark
from records.rollup import WATERMARK


def describe(
    *,
    watermark_id: int,
    last_pass_at: datetime | None,
    newest_id: int,
    oldest_pending: tuple[int, datetime] | None,
    now: datetime,
) -> dict:
    """The freshness block of the pages and the metrics API, from what the pass knows.

    `oldest_pending` is (id, received_at) of the first record above the watermark, if any.
    """
    pending = newest_id - oldest_pending[0] + 1 if oldest_pending else 0
    return {
        "watermark_id": watermark_id,
        "newest_id": max(newest_id, watermark_id),
        "pending_records": pending,
        # 0 and 1 are exact: with one id in the span, the oldest pending record is the newest.
        "pending_estimated": pending > 1,
        "lag_seconds": (
            round(max(0.0, (now - oldest_pending[1]).total_seconds()), 3) if oldest_pending else 0.0
        ),
        "last_pass_at": last_pass_at,
    }


def freshness(now: datetime | None = None) -> dict:
    """Three indexed reads: the watermark, max(id), and the first record above the watermark."""
    watermark = Watermark.objects.filter(name=WATERMARK).values("last_id", "last_pass_at").first()
    last_id = watermark["last_id"] if watermark else 0
    newest = Record.objects.order_by("-id").values_list("id", flat=True).first() or 0
    oldest = None
    if newest > last_id:
        oldest = (
            Record.objects.filter(id__gt=last_id).order_by("id").values_list("id", "received_at")
        ).first()
    return describe(
        watermark_id=last_id,
        last_pass_at=watermark["last_pass_at"] if watermark else None,
        newest_id=newest,
        oldest_pending=oldest,
        now=now or timezone.now(),
    )

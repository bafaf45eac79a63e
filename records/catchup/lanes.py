"""The catch-up's lanes: projects dealt by id into lanes, each with a watermark of its own.

The names of the lanes' rows are the models' (records.models.rollups), for the read path reads
them too; this module holds what only the catch-up does with them."""

from __future__ import annotations

from records.models import (
    LANE_WATERMARK,
    Watermark,
    configured_lanes,
    lane_name,
    lane_of,
    parse_lane_name,
    streaks_folded_name,
)

WATERMARK = LANE_WATERMARK  # one lane's watermark; lane i of n > 1 is "rollups:i/n" (lane_name)

__all__ = [
    "WATERMARK",
    "configured_lanes",
    "folded_upto",
    "lane_name",
    "lane_of",
    "lane_watermarks",
    "lock_watermark",
    "parse_lane_name",
    "streaks_folded_name",
]


def lane_watermarks():
    """The lanes' Watermark rows (of one lane count: see _switch_lanes), as a queryset."""
    return Watermark.objects.lanes()


def folded_upto() -> int:
    """The id up to which every record is folded, whichever its lane: the lowest watermark."""
    return Watermark.objects.folded_upto()


def lock_watermark(lane: int = 0, lanes: int = 1) -> Watermark | None:
    """The lane's watermark, locked; None when the lanes are of another count (or none yet).
    Row lock on PostgreSQL; on SQLite the IMMEDIATE transaction already serialises passes."""
    return Watermark.objects.select_for_update().filter(name=lane_name(lane, lanes)).first()

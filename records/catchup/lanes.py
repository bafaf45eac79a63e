"""The catch-up's lanes: projects dealt by id into lanes, each with a watermark of its own."""

from __future__ import annotations

from django.conf import settings

from records.models import (
    LANE_WATERMARK,
    Watermark,
)

WATERMARK = LANE_WATERMARK  # one lane's watermark; lane i of n > 1 is "rollups:i/n" (lane_name)


def configured_lanes() -> int:
    return settings.DECISIONBOARD["CATCHUP_LANES"]


def lane_of(project_id: int, lanes: int) -> int:
    """The lane of a project. Project ids are handed out in sequence, so the modulo deals the
    projects round robin; a hash would only shuffle them."""
    return project_id % lanes


def lane_name(lane: int, lanes: int) -> str:
    """The Watermark row of a lane; one lane keeps the name the single pass always had."""
    return WATERMARK if lanes == 1 else f"{WATERMARK}:{lane}/{lanes}"


def parse_lane_name(name: str) -> tuple[int, int]:
    """lane_name's inverse: (lane, lanes)."""
    if name == WATERMARK:
        return 0, 1
    lane, lanes = name.removeprefix(WATERMARK + ":").split("/")
    return int(lane), int(lanes)


def lane_watermarks():
    """The lanes' Watermark rows (of one lane count: see _switch_lanes), as a queryset."""
    return Watermark.objects.lanes()


def streaks_folded_name(lane: int, lanes: int) -> str:
    """The Watermark row whose last_pass_at is when the lane last folded its dirty streak
    minutes (fold_dirty_streaks); not a lane's watermark (lane_watermarks)."""
    return "streaks:" + lane_name(lane, lanes)


def folded_upto() -> int:
    """The id up to which every record is folded, whichever its lane: the lowest watermark."""
    return Watermark.objects.folded_upto()


def lock_watermark(lane: int = 0, lanes: int = 1) -> Watermark | None:
    """The lane's watermark, locked; None when the lanes are of another count (or none yet).
    Row lock on PostgreSQL; on SQLite the IMMEDIATE transaction already serialises passes."""
    return Watermark.objects.select_for_update().filter(name=lane_name(lane, lanes)).first()

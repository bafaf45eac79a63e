"""The records app's models, one module per domain; imported here so that Django finds
them and `from records.models import X` works everywhere."""

from __future__ import annotations

from records.models.pricing import CURRENCY, PriceOverride
from records.models.record import (
    Record,
    RecordKey,
    Run,
)
from records.models.rollups import (
    LANE_WATERMARK,
    Classification,
    Grain,
    PendingBatch,
    Rollup,
    Streak,
    StreakSegment,
    ToolDecision,
    ToolMiss,
    Watermark,
    catch_up_project,
)
from records.models.tenancy import (
    KEY_PREFIX,
    LAST_USED_EVERY,
    ApiKey,
    Membership,
    Project,
    ProjectQuerySet,
    hash_key,
)

__all__ = [
    "LANE_WATERMARK",
    "CURRENCY",
    "PriceOverride",
    "KEY_PREFIX",
    "LAST_USED_EVERY",
    "hash_key",
    "ProjectQuerySet",
    "Project",
    "Membership",
    "ApiKey",
    "Run",
    "Record",
    "RecordKey",
    "Watermark",
    "PendingBatch",
    "Grain",
    "catch_up_project",
    "Rollup",
    "Classification",
    "ToolDecision",
    "ToolMiss",
    "Streak",
    "StreakSegment",
]

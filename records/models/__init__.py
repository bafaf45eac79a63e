"""The records app's models, one module per domain; imported here so that Django finds
them and `from records.models import X` works everywhere."""

from __future__ import annotations

from records.models.audit import AuditEntry
from records.models.pricing import CURRENCY, PriceOverride
from records.models.record import (
    Record,
    RecordKey,
    Run,
)
from records.models.redaction import RedactionPolicy, RedactionRule
from records.models.release_marker import (
    MAX_DESCRIPTION_CHARS,
    MAX_LINK_CHARS,
    ReleaseMarker,
    validate_marker_link,
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
    configured_lanes,
    lane_name,
    lane_of,
    parse_lane_name,
    streaks_folded_name,
)
from records.models.tenancy import (
    KEY_PREFIX,
    LAST_USED_EVERY,
    ApiKey,
    Invitation,
    Membership,
    Project,
    ProjectQuerySet,
    Role,
    hash_key,
)

__all__ = [
    "AuditEntry",
    "LANE_WATERMARK",
    "CURRENCY",
    "PriceOverride",
    "RedactionPolicy",
    "RedactionRule",
    "ReleaseMarker",
    "MAX_DESCRIPTION_CHARS",
    "MAX_LINK_CHARS",
    "validate_marker_link",
    "KEY_PREFIX",
    "LAST_USED_EVERY",
    "hash_key",
    "ProjectQuerySet",
    "Project",
    "Membership",
    "Invitation",
    "Role",
    "ApiKey",
    "Run",
    "Record",
    "RecordKey",
    "Watermark",
    "PendingBatch",
    "Grain",
    "catch_up_project",
    "configured_lanes",
    "lane_of",
    "lane_name",
    "parse_lane_name",
    "streaks_folded_name",
    "Rollup",
    "Classification",
    "ToolDecision",
    "ToolMiss",
    "Streak",
    "StreakSegment",
]

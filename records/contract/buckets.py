"""Time buckets of the rollups: a timestamp truncated to its minute, hour or day (UTC)."""

from __future__ import annotations

from datetime import datetime

# The grains, as records.models.Grain stores them (tests/test_rollups.py holds the two equal),
# so that the contract reads no ORM model.
MINUTE = "minute"
HOUR = "hour"
DAY = "day"
GRAINS = (MINUTE, HOUR, DAY)


def truncate(ts: datetime, grain: str) -> datetime:
    ts = ts.replace(second=0, microsecond=0)
    if grain == MINUTE:
        return ts
    ts = ts.replace(minute=0)
    return ts if grain == HOUR else ts.replace(hour=0)


# datetime.replace is slow (its keyword parsing), a real share of a record's fold: the pass
# looks buckets up by their fields instead, each bucket built once. The pass's timestamps all
# come from the database in UTC (settings.TIME_ZONE), so the fields name one instant.
BUCKET_MEMO: dict[tuple, datetime] = {}


def minute_of(ts: datetime) -> datetime:
    """truncate(ts, MINUTE), memoised."""
    key = (ts.minute, ts.hour, ts.day, ts.month, ts.year)
    minute = BUCKET_MEMO.get(key)
    if minute is None:
        if len(BUCKET_MEMO) > 100_000:
            BUCKET_MEMO.clear()
        minute = BUCKET_MEMO[key] = ts.replace(second=0, microsecond=0)
    return minute


def bucket_of(ts: datetime, grain: str) -> datetime:
    """truncate(ts, grain) of a minute or coarser `ts`, memoised."""
    key = (grain, ts)
    bucket = BUCKET_MEMO.get(key)
    if bucket is None:
        if len(BUCKET_MEMO) > 100_000:
            BUCKET_MEMO.clear()
        bucket = BUCKET_MEMO[key] = truncate(ts, grain)
    return bucket

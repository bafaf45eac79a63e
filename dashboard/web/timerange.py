"""The time-range control of every chart page and list: presets up to 90 days or a custom
from/to, read from the URL (so a link keeps it) and drawn by one partial (time_range.html).

`?period=` names a preset of dashboard.queries.page_rollups.PERIODS, or `custom` with `from` and
`to`. Times are RFC 3339 as the API takes them, or the zone-less `2026-11-20T09:00` a browser's
date-time field sends, read as UTC (the pages show UTC everywhere). A list (runs) also offers "any
time"; a chart page always has a range and defaults to the last 6 hours.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.utils.http import urlencode

from dashboard.queries.page_rollups import (
    DEFAULT_PERIOD,
    PERIODS,
    Period,
    custom_period,
    get_period,
)
from records.contract.buckets import truncate
from records.contract.filters import FilterError, parse_time
from records.metrics.definitions import INTERVALS
from records.models import Run

CUSTOM = "custom"
ANY_TIME = ""  # lists only
# A custom range is at most this long (day buckets: a few hundred points at most).
MAX_SPAN = timedelta(days=366)
# Times outside these years are typing errors, and would overflow date arithmetic near 1 or 9999.
EARLIEST, LATEST = datetime(1970, 1, 1, tzinfo=UTC), datetime(2200, 1, 1, tzinfo=UTC)
FIELD_FORMAT = "%Y-%m-%dT%H:%M"  # <input type=datetime-local>


def parse_page_time(param: str, value: str) -> datetime:
    """RFC 3339 with an offset, or a zone-less ISO date-time read as UTC."""
    try:
        when = parse_time(param, value)
    except FilterError as error:
        try:
            when = datetime.fromisoformat(value)
            if when.tzinfo is not None:  # an offset parse_time refused (e.g. no seconds)
                when = when.astimezone(UTC)  # may leave the calendar: parse_time's error then
        except (ValueError, OverflowError):
            raise error from None
        when = when.replace(tzinfo=UTC)
    if not EARLIEST <= when < LATEST:
        raise FilterError(param, "must be between 1970 and 2200")
    return when


@dataclass(frozen=True)
class TimeRange:
    """What the control shows and what the page reads.

    `preset` is a PERIODS name, CUSTOM, or ANY_TIME (lists). For CUSTOM, `start` and `end` are
    the typed bounds (either may be open on a list); for a preset they are None (relative to
    now, resolved by the reader).
    """

    preset: str
    start: datetime | None = None
    end: datetime | None = None

    @property
    def is_custom(self) -> bool:
        return self.preset == CUSTOM

    def period(self, now: datetime) -> Period:
        """The chart pages' Period (dashboard.queries.page_rollups reads it by name)."""
        if self.is_custom:
            end = self.end or now
            start = self.start or end - PERIODS[DEFAULT_PERIOD].span
            return custom_period(start, end)
        return get_period(self.preset or DEFAULT_PERIOD)

    def bounds(self, now: datetime) -> tuple[datetime | None, datetime | None]:
        """A list's [from, to): open ends are None."""
        if self.is_custom:
            return self.start, self.end
        if self.preset in PERIODS:
            return now - PERIODS[self.preset].span, None
        return None, None

    def field(self, which: str) -> str:
        """The value of the From or To field (UTC, as the field shows it)."""
        when = self.start if which == "from" else self.end
        return when.astimezone(UTC).strftime(FIELD_FORMAT) if when else ""


def parse_range(query: Mapping[str, str], *, lists: bool = False) -> TimeRange:
    """The range a query asks for; raises FilterError naming the parameter at fault.

    `from`/`to` without `period` (the API's spelling, links from before presets) are a custom
    range. A preset ignores them: the form sends the fields it hides.
    """
    preset = (query.get("period") or "").strip()
    from_text = (query.get("from") or "").strip()
    to_text = (query.get("to") or "").strip()
    if preset == CUSTOM or (not preset and (from_text or to_text)):
        start = parse_page_time("from", from_text) if from_text else None
        end = parse_page_time("to", to_text) if to_text else None
        if start and end and end <= start:
            raise FilterError("to", "must be after from")
        if start and end and end - start > MAX_SPAN:
            raise FilterError("from", f"a range is at most {MAX_SPAN.days} days")
        return TimeRange(CUSTOM, start, end)
    if preset in PERIODS or (lists and preset == ANY_TIME):
        return TimeRange(preset)
    if not preset:
        return TimeRange(DEFAULT_PERIOD)
    choices = ", ".join([*PERIODS, CUSTOM])
    raise FilterError("period", f"one of: {choices}")


def presets(lists: bool = False, only: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """The control's choices: (value, label)."""
    shown = [(p.name, p.label) for p in PERIODS.values() if not only or p.name in only]
    if lists:
        shown.insert(0, (ANY_TIME, "any time"))
    if not only:
        shown.append((CUSTOM, "custom range…"))
    return shown


def jump_query(latest: datetime, span: timedelta) -> dict[str, str]:
    """A custom range as long as the page's, ending just after the latest data."""
    end = (latest + timedelta(minutes=1)).astimezone(UTC).replace(second=0, microsecond=0)
    start = end - span
    return {
        "period": CUSTOM,
        "from": start.strftime(FIELD_FORMAT),
        "to": end.strftime(FIELD_FORMAT),
    }


# A chart page polls itself this often while its period includes now (and its tab is visible).
LIVE_SECONDS = 10


def in_progress(period: Period, start: datetime, end: datetime, now: datetime):
    """The bucket of the period still filling, (start, end), or None when it is all past."""
    bucket = truncate(now, period.interval)
    if start <= bucket < end:
        return bucket, bucket + INTERVALS[period.interval]
    return None


def latest_data_at(project_id: int, agents: list[str] | None = None) -> datetime | None:
    """When the project's (or these agents') newest record is from, by the run summaries."""
    runs = Run.objects.filter(project_id=project_id)
    if agents:
        runs = runs.filter(agent__in=agents)
    return runs.order_by("-last_ts").values_list("last_ts", flat=True).first()


def empty_period(
    project_id: int, agents: list[str], period: Period, start: datetime, end: datetime
) -> dict:
    """What a page with nothing in its period says: when the latest data is from and a link
    (query string) to a range as long as this one ending there, when that is elsewhere."""
    latest = latest_data_at(project_id, agents)
    jump = ""
    if latest is not None and not start <= latest < end:
        query = jump_query(latest, period.span)
        if agents:
            query["agent"] = ",".join(agents)
        jump = urlencode(query)
    return {"latest": latest, "jump": jump}

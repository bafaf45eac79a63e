"""The state machine of an alert rule (docs/architecture.md, "Alerts"), as pure functions over
plain data.

`evaluate()` takes one rule's condition, the value of each group at `now` and the states left by
the previous tick, and returns the new states and the events (transitions, re-notifications,
severity changes). No database, no clock: the engine passes `now`, the preview replays a day of
values through `replay()`, and the tests freeze time by choosing `now`.

States per group: `ok`, `pending` (the condition holds, not yet for long enough), `firing`, and
`nodata` (no value, when the rule says no data is worth an alert). A firing group has a severity:
`critical` past the threshold, `warning` past the warning threshold only.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

OK, PENDING, FIRING, NODATA = "ok", "pending", "firing", "nodata"
STATES = (OK, PENDING, FIRING, NODATA)
CRITICAL, WARNING = "critical", "warning"
# States that page someone: entering one notifies, leaving one notifies if it was notified.
NOTIFYING = (FIRING, NODATA)

COMPARATORS: dict[str, Callable[[float, float], bool]] = {
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
}
SYMBOLS = {"gt": ">", "gte": "≥", "lt": "<", "lte": "≤"}

# What no data (no value, or fewer records than the rule's minimum) means.
NODATA_OK = "ok"  # the condition does not hold: a firing group resolves
NODATA_ALERT = "nodata"  # the group enters `nodata`, which notifies like firing
NODATA_KEEP = "keep"  # the group stays as it was
NO_DATA_MODES = (NODATA_OK, NODATA_ALERT, NODATA_KEEP)

# Event reasons.
TRANSITION, RENOTIFY, SEVERITY = "transition", "renotify", "severity"

# A pending group whose rule was not evaluated for this long (paused, or workers down) starts its
# `for` period again: the condition was not seen holding in between.
STALE_AFTER = timedelta(minutes=5)


@dataclass(frozen=True)
class Condition:
    """What a rule checks and how it behaves, without the metric it reads."""

    comparator: str
    threshold: float
    warning: float | None = None
    for_duration: timedelta = timedelta(0)
    no_data: str = NODATA_OK
    # Fewer records behind a value than this is no data (rates and latencies of a handful of
    # records are noise). Counts and streaks use 0: zero is a real count.
    min_records: int = 1
    # Counts: a group without rows counts 0 rather than having no data, so "fewer than 10
    # records in 10 minutes" fires when an agent goes quiet.
    absent_is_zero: bool = False
    grouped: bool = False
    renotify: timedelta | None = None
    silenced_until: datetime | None = None
    paused: bool = False

    def level(self, value: float) -> str | None:
        """`critical`, `warning` or None for a value."""
        compare = COMPARATORS[self.comparator]
        if compare(value, self.threshold):
            return CRITICAL
        if self.warning is not None and compare(value, self.warning):
            return WARNING
        return None

    def threshold_for(self, severity: str) -> float:
        if severity == WARNING and self.warning is not None:
            return self.warning
        return self.threshold

    def silenced(self, now: datetime) -> bool:
        return self.silenced_until is not None and now < self.silenced_until


def condition_errors(comparator: str, threshold: float, warning: float | None) -> dict:
    """Field errors of a condition: the warning threshold must be met before the threshold."""
    errors: dict[str, list[str]] = {}
    if comparator not in COMPARATORS:
        errors["comparator"] = [f"must be one of: {', '.join(COMPARATORS)}"]
        return errors
    if warning is not None and threshold is not None:
        compare = COMPARATORS[comparator]
        if compare(warning, threshold) or warning == threshold:
            errors["warning_threshold"] = [
                f"must be reached before the threshold: with {SYMBOLS[comparator]} it is "
                f"{'below' if comparator in ('gt', 'gte') else 'above'} {threshold:g}"
            ]
    return errors


@dataclass(frozen=True)
class Sample:
    """A group's value over the rule's window and the number of records behind it."""

    value: float | None
    count: int


@dataclass(frozen=True)
class GroupState:
    state: str = OK
    severity: str = ""
    since: datetime | None = None  # when `state` began
    pending_since: datetime | None = None
    # The last notification of the current episode in a notifying state; None when it has not
    # been notified (it began silenced), which the first unsilenced tick makes up for.
    notified_at: datetime | None = None
    value: float | None = None
    count: int = 0


@dataclass(frozen=True)
class Event:
    group: str
    from_state: str
    to_state: str
    severity: str
    reason: str
    value: float | None
    count: int
    threshold: float
    notify: bool  # channels are to be told
    silenced: bool  # they would have been, but the rule is silenced


@dataclass
class Result:
    states: dict[str, GroupState]
    events: list[Event] = field(default_factory=list)
    # Groups of a grouped rule that are ok and had no rows: their state is forgotten so that
    # models or agents that come and go do not pile up.
    dropped: set[str] = field(default_factory=set)


def evaluate(
    cond: Condition,
    samples: Mapping[str, Sample],
    states: Mapping[str, GroupState],
    *,
    now: datetime,
    last_evaluated_at: datetime | None = None,
) -> Result:
    """One tick: each group's new state, and an event for each change worth recording."""
    if cond.paused:
        return Result(states=dict(states))
    stale = last_evaluated_at is None or now - last_evaluated_at > STALE_AFTER
    silenced = cond.silenced(now)
    groups = set(samples) | set(states)
    if not cond.grouped:
        groups.add("")
    result = Result(states={})
    for group in sorted(groups):
        prev = states.get(group, GroupState())
        sample = samples.get(group)
        new, transition = _step(cond, prev, sample, now, stale)
        new, event = _notify(cond, prev, new, transition, group, now, silenced)
        if event is not None:
            result.events.append(event)
        if cond.grouped and sample is None and new.state == OK:
            result.dropped.add(group)
            continue
        result.states[group] = new
    return result


def _step(
    cond: Condition, prev: GroupState, sample: Sample | None, now: datetime, stale: bool
) -> tuple[GroupState, bool]:
    """The group's next state, and whether its state (or its severity while firing) changed."""
    if sample is None and cond.absent_is_zero:
        sample = Sample(0.0, 0)
    has_data = sample is not None and sample.value is not None and sample.count >= cond.min_records
    value = sample.value if sample is not None else None
    count = sample.count if sample is not None else 0
    if not has_data:
        if cond.no_data == NODATA_KEEP:
            return replace(prev, value=value, count=count), False
        target, severity = (NODATA, "") if cond.no_data == NODATA_ALERT else (OK, "")
        pending_since = None
    else:
        level = cond.level(value)
        if level is None:
            target, severity, pending_since = OK, "", None
        elif prev.state == FIRING:
            target, severity, pending_since = FIRING, level, None
        else:
            pending_since = (
                prev.pending_since if prev.state == PENDING and not stale else None
            ) or now
            if now - pending_since >= cond.for_duration:
                target, severity, pending_since = FIRING, level, None
            else:
                target, severity = PENDING, level
    changed = target != prev.state or (target == FIRING and severity != prev.severity)
    since = prev.since if target == prev.state and prev.since is not None else now
    new = GroupState(
        state=target,
        severity=severity,
        since=since,
        pending_since=pending_since,
        notified_at=prev.notified_at if target in NOTIFYING else None,
        value=value,
        count=count,
    )
    return new, changed


def _notify(
    cond: Condition,
    prev: GroupState,
    new: GroupState,
    changed: bool,
    group: str,
    now: datetime,
    silenced: bool,
) -> tuple[GroupState, Event | None]:
    """The event of this tick for one group, if any, and the state with `notified_at` kept."""
    if changed:
        if new.state == prev.state:
            reason, notify = SEVERITY, True
        elif new.state in NOTIFYING:
            reason, notify = TRANSITION, True
        else:
            # Leaving firing/nodata tells whoever was told it began (the resolved message).
            reason, notify = TRANSITION, prev.state in NOTIFYING and prev.notified_at is not None
    elif new.state in NOTIFYING and not silenced:
        due = new.notified_at is None or (
            cond.renotify is not None and now - new.notified_at >= cond.renotify
        )
        if not due:
            return new, None
        reason, notify = RENOTIFY, True
    else:
        return new, None
    muted = notify and silenced
    if notify and not muted and new.state in NOTIFYING:
        new = replace(new, notified_at=now)
    elif new.state != prev.state and new.state in NOTIFYING:
        new = replace(new, notified_at=None)  # a new episode nobody has heard of yet
    severity = new.severity or prev.severity
    event = Event(
        group=group,
        from_state=prev.state,
        to_state=new.state,
        severity=severity,
        reason=reason,
        value=new.value,
        count=new.count,
        threshold=cond.threshold_for(severity),
        notify=notify and not muted,
        silenced=muted,
    )
    return new, event


def replay(
    cond: Condition,
    ticks: Iterable[tuple[datetime, Mapping[str, Sample]]],
    states: Mapping[str, GroupState] | None = None,
) -> list[tuple[datetime, Result]]:
    """Evaluate tick after tick from `states` (none: every group ok), as the beat would."""
    out = []
    current = dict(states or {})
    last: datetime | None = None
    for now, samples in ticks:
        result = evaluate(cond, samples, current, now=now, last_evaluated_at=last)
        out.append((now, result))
        current, last = result.states, now
    return out

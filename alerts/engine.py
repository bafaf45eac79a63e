"""One evaluation tick: every active rule, from rollups, into states, events and notifications.

The tick claims the rules it evaluates with a lease (so overlapping ticks, or two workers with
beat, never both fire), reads each project's minute rows once (alerts.windows), folds each rule
from them, runs the pure state machine (alerts.evaluate) and writes everything in one
transaction. A rule that fails, in its definition, its evaluation or its writes, is logged and
keeps its `last_error`; the others go on. Deliveries are handed to `enqueue(event_id,
channel_id)`, a callable the caller passes in (the workers pass a Celery task), so that this
domain code never imports the workers.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import secrets
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import groupby

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from alerts import notices, release_watch
from alerts.evaluate import OK, GroupState, Result, Sample, evaluate
from alerts.models import AlertEvent, AlertState, Channel, Notification, Rule
from alerts.windows import (
    RELEASE_REGRESSION,
    STREAK,
    UNWINDOWED,
    Query,
    RowIndex,
    fold,
    read_window,
    window_grain,
    window_start,
)
from records.contract.buckets import truncate
from records.models import Grain, Streak
from records.store.backends import backend

log = logging.getLogger(__name__)

Enqueue = Callable[[int, int], None]
LEASE = timedelta(minutes=2)
# A queued notification untouched for this long lost its task (a broker outage, a worker
# killed mid-retry: the longest backoff is 4 minutes), so the tick enqueues it again.
REQUEUE_AFTER = timedelta(minutes=15)
# An AlertState row's columns for a GroupState (the dataclass's fields), then when it was saved.
_GROUP_STATE_FIELDS = tuple(f.name for f in dataclasses.fields(GroupState))
_STATE_FIELDS = [*_GROUP_STATE_FIELDS, "updated_at"]


@dataclass
class Tick:
    rules: int = 0
    errors: int = 0
    events: int = 0
    notifications: int = 0
    seconds: float = 0.0
    failed: dict[int, str] = field(default_factory=dict)


@dataclass
class _Outcome:
    rule: Rule
    result: Result
    # Each group's event detail (AlertEvent.detail), for rules that have one.
    details: dict[str, dict] = field(default_factory=dict)


def evaluate_all(*, now: datetime | None = None, enqueue: Enqueue | None = None) -> Tick:
    """Evaluate every active rule once at `now`; returns what the tick did."""
    started = time.perf_counter()
    now = now or timezone.now()
    token = secrets.token_hex(16)
    tick = Tick()
    queued: list[tuple[int, int]] = []
    claimed = (
        Rule.objects.filter(paused=False)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
        .update(lease_token=token, lease_until=now + LEASE)
    )
    try:
        if claimed:
            rules = list(Rule.objects.filter(lease_token=token).order_by("project_id", "id"))
            tick.rules = len(rules)
            stored = _stored_states(rules)
            outcomes: list[_Outcome] = []
            for project_id, project_rules in groupby(rules, key=lambda r: r.project_id):
                outcomes += _evaluate_project(project_id, list(project_rules), stored, now, tick)
            queued = _persist(outcomes, stored, _channels(rules), now, tick)
            done = [o.rule.pk for o in outcomes if o.rule.pk not in tick.failed]
            for start in range(0, len(done), 500):
                Rule.objects.filter(pk__in=done[start : start + 500]).update(
                    last_evaluated_at=now, last_error=""
                )
            for rule_id, message in tick.failed.items():
                Rule.objects.filter(pk=rule_id).update(last_error=message[:2000])
    finally:
        Rule.objects.filter(lease_token=token).update(lease_token="", lease_until=None)
    tick.errors = len(tick.failed)
    if enqueue is not None:
        queued += _stale_notifications(now)
        for event_id, channel_id in queued:
            try:
                enqueue(event_id, channel_id)
            except Exception as exc:  # the broker's own errors: the requeue sweep retries
                log.warning("could not enqueue notification %s/%s: %s", event_id, channel_id, exc)
    tick.notifications = len(queued)
    tick.seconds = time.perf_counter() - started
    return tick


@dataclass(frozen=True, slots=True)
class _Stored:
    pk: int
    state: GroupState


Stored = dict[int, dict[str, _Stored]]
_STORED_FIELDS = ("pk", "rule_id", "group", *_GROUP_STATE_FIELDS)


def _stored_states(rules: list[Rule]) -> Stored:
    # Plain tuples, not model instances: a tick reads every group of every rule.
    stored: Stored = defaultdict(dict)
    ids = [r.pk for r in rules]
    for start in range(0, len(ids), 500):
        rows = AlertState.objects.filter(rule_id__in=ids[start : start + 500]).values_list(
            *_STORED_FIELDS
        )
        for pk, rule_id, group, *fields in rows:
            stored[rule_id][group] = _Stored(pk, GroupState(*fields))
    return stored


def _channels(rules: list[Rule]) -> dict[int, list[Channel]]:
    """Each rule's channels, in two queries (prefetch_related costs a queryset per rule)."""
    links = Rule.channels.through.objects.filter(rule_id__in=[r.pk for r in rules])
    pairs = list(links.values_list("rule_id", "channel_id"))
    by_id = Channel.objects.in_bulk({channel_id for _, channel_id in pairs})
    out: dict[int, list[Channel]] = defaultdict(list)
    for rule_id, channel_id in pairs:
        out[rule_id].append(by_id[channel_id])
    return out


def _evaluate_project(
    project_id: int,
    rules: list[Rule],
    stored: Stored,
    now: datetime,
    tick: Tick,
) -> list[_Outcome]:
    valid: list[Rule] = []
    for rule in rules:
        errors = rule.definition_errors()
        if errors:
            tick.failed[rule.pk] = f"invalid rule: {errors}"
            log.error("alert rule %s is invalid: %s", rule.pk, errors)
        else:
            valid.append(rule)
    try:
        indexes, streaks = read_rule_rows(project_id, valid, now)
    except Exception as exc:
        log.exception("reading rollups for project %s failed", project_id)
        for rule in valid:
            tick.failed[rule.pk] = f"reading rollups failed: {exc!r}"
        return []
    outcomes = []
    cache: dict[tuple, dict[str, Sample]] = {}
    for rule in valid:
        previous = {g: s.state for g, s in stored.get(rule.pk, {}).items()}
        details: dict[str, dict] = {}
        try:
            if rule.metric == RELEASE_REGRESSION:
                samples, details = release_watch.regression_samples(
                    project_id, rule.agent, rule.threshold, rule.min_records, now
                )
            else:
                samples = rule_samples(rule, indexes, streaks, now, cache)
            result = evaluate(
                rule.condition(),
                samples,
                previous,
                now=now,
                last_evaluated_at=rule.last_evaluated_at,
            )
        except Exception as exc:
            log.exception("alert rule %s failed", rule.pk)
            tick.failed[rule.pk] = f"evaluation failed: {exc!r}"
            continue
        outcomes.append(_Outcome(rule, result, details))
    return outcomes


def read_rule_rows(
    project_id: int, rules: list[Rule], now: datetime
) -> tuple[dict[tuple[Grain, datetime], RowIndex], list[tuple[str, int]]]:
    """The project's rows for every rule at once, read and added up once per window (minute
    rows for short windows, hour rows for long ones); and the streaks if a rule watches them."""
    indexes: dict[tuple[Grain, datetime], RowIndex] = {}
    for grain in (Grain.MINUTE, Grain.HOUR):
        windowed = [
            r
            for r in rules
            if r.metric not in UNWINDOWED
            and window_grain(r.window_minutes) == grain
            and not notices.is_scoped(r.query())
        ]
        if not windowed:
            continue
        by_start: dict[datetime, list[Query]] = defaultdict(list)
        for rule in windowed:
            by_start[window_start(now, rule.window_minutes)].append(rule.query())
        for start, queries in by_start.items():
            rows = read_window(project_id, queries, start, truncate(now, grain), grain)
            indexes[(grain, start)] = RowIndex(rows)
    streaks: list[tuple[str, int]] = []
    if any(r.metric == STREAK for r in rules):
        streaks = list(Streak.objects.filter(project_id=project_id).values_list("model", "current"))
    return indexes, streaks


def rule_samples(
    rule: Rule,
    indexes: dict[tuple[Grain, datetime], RowIndex],
    streaks: list[tuple[str, int]],
    now: datetime,
    cache: dict | None = None,
) -> dict[str, Sample]:
    """Each group's value for a rule at `now`; rules reading the same thing share one fold."""
    query = rule.query()
    if query.metric == STREAK:
        return streak_samples(query, streaks)
    window = (window_grain(rule.window_minutes), window_start(now, rule.window_minutes))
    key = (query, window)
    if cache is not None and key in cache:
        return cache[key]
    if notices.is_scoped(query):
        # A detail the rollups do not split by: this rule's own count (alerts.notices).
        rows = notices.window_rows(rule.project_id, query, rule.window_minutes, now)
        folded = fold(notices.unscoped(query), rows)
    else:
        folded = fold(query, indexes[window].rows_for(query))
    samples = {group: Sample(*acc.result()) for group, acc in folded.items()}
    if cache is not None:
        cache[key] = samples
    return samples


def streak_samples(query: Query, streaks: list[tuple[str, int]]) -> dict[str, Sample]:
    """Current contract-broken streaks; ungrouped, the longest current one among the models."""
    wanted = [
        (model, current)
        for model, current in streaks
        if (not query.model or model == query.model)
        and (not query.classifier or model == query.classifier)
    ]
    if query.group_by == "model":
        return {model: Sample(float(current), 1) for model, current in wanted}
    if not wanted:
        return {}
    return {"": Sample(float(max(current for _, current in wanted)), 1)}


def _persist(
    outcomes: list[_Outcome],
    stored: Stored,
    channels: dict[int, list[Channel]],
    now: datetime,
    tick: Tick,
) -> list[tuple[int, int]]:
    """Write the tick in one transaction; should that fail, rule by rule, so one bad rule's
    writes cannot cost the others theirs."""
    try:
        with transaction.atomic():
            return _write(outcomes, stored, channels, now, tick)
    except Exception:
        log.exception("writing the alert tick failed; writing rule by rule")
    queued = []
    for outcome in outcomes:
        try:
            with transaction.atomic():
                queued += _write([outcome], stored, channels, now, tick)
        except Exception as exc:
            log.exception("writing alert rule %s failed", outcome.rule.pk)
            tick.failed[outcome.rule.pk] = f"writing its state failed: {exc!r}"
    return queued


def _write(
    outcomes: list[_Outcome],
    stored: Stored,
    channels: dict[int, list[Channel]],
    now: datetime,
    tick: Tick,
) -> list[tuple[int, int]]:
    created, changed, dropped = [], [], []
    events: list[tuple] = []
    for outcome in outcomes:
        rule, result = outcome.rule, outcome.result
        rule_states = stored.get(rule.pk, {})
        for group, state in result.states.items():
            old = rule_states.get(group)
            if rule.grouped and state.state == OK:
                # A grouped rule keeps rows for its groups that are not ok only (as Prometheus
                # keeps ALERTS series for pending and firing ones): a rule by model over 200
                # models would otherwise read and write 200 rows a minute to say "fine".
                if old is not None:
                    dropped.append(old.pk)
            elif old is None:
                created.append((rule.pk, group, *_state_values(state, now)))
            elif old.state != state:
                changed.append((*_state_values(state, now), old.pk))
        dropped += [rule_states[g].pk for g in result.dropped if g in rule_states]
        events += [
            (
                rule.pk,
                rule.project_id,
                e.group,
                e.from_state,
                e.to_state,
                e.severity,
                e.reason,
                e.value,
                e.count,
                e.threshold,
                rule.comparator,
                rule.window_minutes,
                e.notify,
                e.silenced,
                _db_time(now),
                json.dumps(outcome.details.get(e.group, {})),
            )
            for e in result.events
        ]
    _insert(AlertState, ("rule_id", "group", *_STATE_FIELDS), created)
    if changed:
        assignments = ", ".join(f"{connection.ops.quote_name(f)} = %s" for f in _STATE_FIELDS)
        with connection.cursor() as cursor:
            cursor.executemany(
                f"UPDATE {AlertState._meta.db_table} SET {assignments} WHERE id = %s", changed
            )
    if dropped:
        AlertState.objects.filter(pk__in=dropped).delete()
    # Only events that notify a channel need their ids back, and they are few.
    notifying = [e for e in events if e[_NOTIFY] and channels.get(e[0])]
    _insert(
        AlertEvent, _EVENT_COLUMNS, [e for e in events if not (e[_NOTIFY] and channels.get(e[0]))]
    )
    event_ids = _insert_returning(AlertEvent, _EVENT_COLUMNS, notifying)
    notifications = [
        Notification(
            event_id=event_id,
            channel=channel,
            status=(
                Notification.Status.SKIPPED if channel.disabled else Notification.Status.QUEUED
            ),
            created_at=now,
            updated_at=now,
        )
        for event_id, event in zip(event_ids, notifying, strict=True)
        for channel in channels[event[0]]
    ]
    Notification.objects.bulk_create(notifications, batch_size=500)
    tick.events += len(events)
    return [
        (n.event_id, n.channel.pk) for n in notifications if n.status == Notification.Status.QUEUED
    ]


# The tick's writes skip the ORM: on a first tick after many rules are created, building and
# bulk-creating model instances for thousands of states and events took most of it; COPY
# writes them in a fraction of bulk_create's time on PostgreSQL (bench/alerts.py).
_EVENT_COLUMNS = ("rule_id", "project_id", *AlertEvent.FACTS)
_NOTIFY = _EVENT_COLUMNS.index("notify")
_INSERT_BATCH = 500


def _db_time(value: datetime | None):
    return connection.ops.adapt_datetimefield_value(value) if value is not None else None


def _state_values(state: GroupState, now: datetime) -> tuple:
    """A state's _STATE_FIELDS values, as the database driver wants them."""
    return (
        state.state,
        state.severity,
        _db_time(state.since or now),
        _db_time(state.pending_since),
        _db_time(state.notified_at),
        state.value,
        state.count,
        _db_time(now),
    )


def _insert(model, columns: tuple[str, ...], rows: list[tuple]) -> None:
    """Insert `rows`: COPY on PostgreSQL, executemany on SQLite (fast there)."""
    if not rows:
        return
    quote = connection.ops.quote_name
    table, names = quote(model._meta.db_table), [quote(c) for c in columns]
    with connection.cursor() as cursor:
        backend().insert_rows(cursor, table, names, rows)


def _insert_returning(model, columns: tuple[str, ...], rows: list[tuple]) -> list[int]:
    """Insert `rows` and return their ids in order (PostgreSQL and SQLite return RETURNING
    rows in insertion order, which Django's bulk_create relies on too)."""
    quote = connection.ops.quote_name
    table, names = quote(model._meta.db_table), ", ".join(quote(c) for c in columns)
    one = "(" + ", ".join(["%s"] * len(columns)) + ")"
    ids: list[int] = []
    with connection.cursor() as cursor:
        for start in range(0, len(rows), _INSERT_BATCH):
            chunk = rows[start : start + _INSERT_BATCH]
            values = ", ".join([one] * len(chunk))
            cursor.execute(
                f"INSERT INTO {table} ({names}) VALUES {values} RETURNING id",
                [value for row in chunk for value in row],
            )
            ids += [row[0] for row in cursor.fetchall()]
    return ids


def _stale_notifications(now: datetime) -> list[tuple[int, int]]:
    stale = list(
        Notification.objects.filter(
            status=Notification.Status.QUEUED, updated_at__lt=now - REQUEUE_AFTER
        ).values_list("pk", "event_id", "channel_id")[:500]
    )
    if stale:
        Notification.objects.filter(pk__in=[pk for pk, _, _ in stale]).update(updated_at=now)
    return [(event_id, channel_id) for _, event_id, channel_id in stale]

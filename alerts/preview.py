"""What a rule would have done over the past day, as data for a chart.

The metric is folded from minute rollups exactly as the engine folds it, slid over the day one
minute at a time, and replayed through the same state machine from an all-ok start, ignoring
pause and silence. A Preview holds each group's value over the day, the threshold (and warning
threshold), and each minute the rule would have been firing;
dashboard.charts.alert_charts.alert_preview draws it. A streak rule's preview is each model's
streak hour by hour, folded from the hourly streak segments
(records.metrics.definitions.streak_history).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from django.utils import timezone

from alerts import notices, release_watch
from alerts.evaluate import FIRING, TRANSITION, Sample, replay
from alerts.models import Rule
from alerts.windows import (
    RELEASE_REGRESSION,
    STREAK,
    RowIndex,
    fold_by_minute,
    read_rows,
    slide,
    window_start,
)
from records.contract.buckets import truncate
from records.metrics.definitions import streak_history
from records.models import Grain

MAX_GROUPS = 8


@dataclass
class Line:
    """One group's value over the day (None where it had no records)."""

    label: str  # the group (an agent or model name, as posted), or the metric's label
    x: list[datetime]
    y: list[float | None]


@dataclass
class Preview:
    y_title: str
    threshold: float
    warning: float | None
    lines: list[Line] = field(default_factory=list)
    # Where the rule would have been firing: (when, the value then).
    would_fire: list[tuple[datetime, float | None]] = field(default_factory=list)
    # Streaks are read at the end of each hour: their lines are steps.
    steps: bool = False
    # Each time the rule would have started firing: (when, group, value).
    fired: list[tuple[datetime, str, float | None]] = field(default_factory=list)
    groups_shown: int = 0
    groups_total: int = 0
    note: str = ""


def preview_rule(rule: Rule, *, now: datetime | None = None, hours: int = 24) -> Preview:
    """The preview of a rule, saved or not (it needs `project_id` and its definition)."""
    errors = rule.definition_errors()
    if errors:
        raise ValueError(f"the rule cannot be previewed: {errors}")
    now = now or timezone.now()
    if rule.metric == STREAK:
        return _streak_preview(rule, now, hours)
    if rule.metric == RELEASE_REGRESSION:
        return _regression_preview(rule, now)
    query = rule.query()
    condition = replace(rule.condition(), paused=False, silenced_until=None)
    end = truncate(now, Grain.MINUTE)
    times = [end - timedelta(minutes=m) for m in range(hours * 60 - 1, -1, -1)]
    # Minute rows even for an hour window, so each minute sees its hour only up to itself.
    first = window_start(times[0], rule.window_minutes)
    if notices.is_scoped(query):  # a detail the rollups do not split by (alerts.notices)
        rows = notices.scoped_rows(
            rule.project_id, query, first, end + timedelta(minutes=1), Grain.MINUTE
        )
        query = notices.unscoped(query)
    else:
        rows = read_rows(rule.project_id, [query], first, end)
    per_group = fold_by_minute(query, RowIndex(rows).rows_for(query))
    if rule.group_by:
        weight = {
            g: sum(acc.result()[1] for acc in buckets.values()) for g, buckets in per_group.items()
        }
        groups = sorted(weight, key=lambda g: (-weight[g], g))
    else:
        groups = [""]
    shown = groups[:MAX_GROUPS]
    series = {g: slide(query, per_group.get(g, {}), times, rule.window_minutes) for g in shown}
    ticks = [
        (t, {g: Sample(*series[g][i]) for g in shown if series[g][i][1] > 0})
        for i, t in enumerate(times)
    ]
    history = replay(condition, ticks)

    lines = [
        Line(
            g or rule.metric_label,
            times,
            [value if count > 0 else None for value, count in series[g]],
        )
        for g in shown
    ]
    would_fire: list[tuple[datetime, float | None]] = []
    fired: list[tuple[datetime, str, float | None]] = []
    for t, result in history:
        would_fire += [
            (t, state.value) for state in result.states.values() if state.state == FIRING
        ]
        fired += [
            (t, e.group, e.value)
            for e in result.events
            if e.to_state == FIRING and e.reason == TRANSITION
        ]
    note = ""
    if len(groups) > len(shown):
        note = f"Showing the {len(shown)} busiest of {len(groups)} groups."
    return Preview(
        y_title=rule.metric_label,
        threshold=rule.threshold,
        warning=rule.warning_threshold,
        lines=lines,
        would_fire=would_fire,
        fired=fired,
        groups_shown=len(shown),
        groups_total=len(groups),
        note=note,
    )


def _streak_preview(rule: Rule, now: datetime, hours: int) -> Preview:
    """Each model's streak at the end of every hour of the past `hours`, from the hourly streak
    segments, and a marker on each hour in which it reached the threshold."""
    end = truncate(now, Grain.HOUR) + timedelta(hours=1)
    start = end - timedelta(hours=hours)
    pinned = {m for m in (rule.model, rule.classifier) if m}
    history = streak_history(rule.project_id, start, end, pinned or None)
    if len(pinned) > 1:  # a model and a different classifier: no model is both
        history = {}
    level = rule.condition().level

    def highest(model: str) -> int:
        return max((peak for _, _, peak in history[model]), default=0)

    models = sorted(history, key=lambda m: (-highest(m), m))
    shown = models[:MAX_GROUPS]
    fired: list[tuple[datetime, str, float | None]] = []
    for model in models:
        breaching = False
        for t, _, peak in history[model]:
            now_breaching = level(float(peak)) is not None
            if now_breaching and not breaching:
                fired.append((t, model, float(peak)))
            breaching = now_breaching
    hour = timedelta(hours=1)
    lines = [
        Line(model, [t + hour for t, _, _ in history[model]], [c for _, c, _ in history[model]])
        for model in shown
    ]
    would_fire = [
        (t + hour, float(peak))
        for model in shown
        for t, _, peak in history[model]
        if level(float(peak)) is not None
    ]
    note = (
        "Streaks are folded by the hour: each line is a model's streak at the end of each hour, "
        "a marker an hour in which it reached the threshold (the rule's for-duration is not "
        "applied at this resolution)."
    )
    if len(models) > len(shown):
        note += f" Showing the {len(shown)} highest of {len(models)} models."
    return Preview(
        y_title="contract-broken streak",
        threshold=rule.threshold,
        warning=rule.warning_threshold,
        lines=lines,
        would_fire=would_fire,
        steps=True,
        fired=fired,
        groups_shown=len(shown),
        groups_total=len(models),
        note=note,
    )


def _regression_preview(rule: Rule, now: datetime) -> Preview:
    """What a release regression rule finds now: a point for each measure of each agent's
    newest release that regressed against the release before, at its q-value. It compares
    releases, not a window, so it has no past day to replay."""
    samples, details = release_watch.regression_samples(
        rule.project_id, rule.agent, rule.threshold, rule.min_records, now
    )
    groups = sorted(samples, key=lambda g: (samples[g].value, g))
    shown = groups[:MAX_GROUPS]
    lines = [Line(g, [now], [samples[g].value]) for g in shown]
    note = (
        "A release regression rule compares each agent's newest release with the one before "
        "it: each point is a measure that got worse, at its q-value, as the rule sees it now."
    )
    if not groups:
        note += " Nothing regressed, or no agent has two releases with enough runs yet."
    if len(groups) > len(shown):
        note += f" Showing the {len(shown)} most significant of {len(groups)}."
    return Preview(
        y_title="q-value",
        threshold=rule.threshold,
        warning=rule.warning_threshold,
        lines=lines,
        would_fire=[(now, samples[g].value) for g in shown],
        fired=[(now, g, samples[g].value) for g in shown],
        groups_shown=len(shown),
        groups_total=len(groups),
        note=note,
    )

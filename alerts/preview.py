"""What a rule would have done over the past day, as a Plotly figure (DESIGN §7).

The metric is folded from minute rollups exactly as the engine folds it, slid over the day one
minute at a time, and replayed through the same state machine from an all-ok start, ignoring
pause and silence. The figure draws each group's value, the threshold (and warning threshold),
and a marker wherever the rule would have been firing. A streak rule's preview is each model's
streak hour by hour, folded from the hourly streak segments (records.metrics.streak_history).
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import plotly.graph_objects as go
from django.utils import timezone

from alerts.evaluate import FIRING, TRANSITION, Sample, replay
from alerts.models import Rule
from alerts.windows import STREAK, RowIndex, fold_by_minute, read_rows, slide, window_start
from records.metrics import streak_history
from records.models import Grain
from records.rollup import truncate

MAX_GROUPS = 8
_RED, _ORANGE = "#d92d20", "#f79009"


@dataclass
class Preview:
    figure: dict
    # Each time the rule would have started firing: (when, group, value).
    fired: list[tuple[datetime, str, float | None]] = field(default_factory=list)
    groups_shown: int = 0
    groups_total: int = 0
    note: str = ""


def _label(group: str, rule: Rule) -> str:
    # Group names are agent and model names from posted records; plotly.js reads a few HTML
    # tags in trace names, so they are escaped like any untrusted text on a page.
    return html.escape(group) if group else rule.metric_label


def preview_rule(rule: Rule, *, now: datetime | None = None, hours: int = 24) -> Preview:
    """The preview of a rule, saved or not (it needs `project_id` and its definition)."""
    errors = rule.definition_errors()
    if errors:
        raise ValueError(f"the rule cannot be previewed: {errors}")
    now = now or timezone.now()
    if rule.metric == STREAK:
        return _streak_preview(rule, now, hours)
    query = rule.query()
    condition = replace(rule.condition(), paused=False, silenced_until=None)
    end = truncate(now, Grain.MINUTE)
    times = [end - timedelta(minutes=m) for m in range(hours * 60 - 1, -1, -1)]
    # Minute rows even for an hour window, so each minute sees its hour only up to itself.
    rows = read_rows(rule.project_id, [query], window_start(times[0], rule.window_minutes), end)
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

    fig = go.Figure()
    fired: list[tuple[datetime, str, float | None]] = []
    firing_x: list[datetime] = []
    firing_y: list[float | None] = []
    for g in shown:
        values = [value if count > 0 else None for value, count in series[g]]
        fig.add_trace(
            go.Scatter(x=times, y=values, mode="lines", name=_label(g, rule), connectgaps=False)
        )
    for t, result in history:
        for state in result.states.values():
            if state.state == FIRING:
                firing_x.append(t)
                firing_y.append(state.value)
        fired += [
            (t, e.group, e.value)
            for e in result.events
            if e.to_state == FIRING and e.reason == TRANSITION
        ]
    fig.add_trace(
        go.Scatter(
            x=firing_x,
            y=firing_y,
            mode="markers",
            name="would fire",
            marker={"color": _RED, "size": 6, "symbol": "x"},
        )
    )
    note = ""
    if len(groups) > len(shown):
        note = f"Showing the {len(shown)} busiest of {len(groups)} groups."
    return _preview(fig, rule, hours, rule.metric_label, fired, len(shown), len(groups), note)


def _preview(
    fig: go.Figure,
    rule: Rule,
    hours: int,
    y_title: str,
    fired: list[tuple[datetime, str, float | None]],
    shown: int,
    total: int,
    note: str,
) -> Preview:
    """The threshold lines, the layout both previews share, and the Preview around them."""
    _thresholds(fig, rule)
    fig.update_layout(
        height=340,
        margin={"l": 50, "r": 20, "t": 30, "b": 40},
        xaxis={"title": {"text": "time (UTC)"}},
        yaxis={"title": {"text": y_title}},
        legend={"orientation": "h", "y": -0.2},
        title={"text": f"{rule.describe()}: past {hours} h", "font": {"size": 13}},
    )
    return Preview(
        figure=json.loads(fig.to_json()),
        fired=fired,
        groups_shown=shown,
        groups_total=total,
        note=note,
    )


def _thresholds(fig: go.Figure, rule: Rule) -> None:
    fig.add_hline(
        y=rule.threshold,
        line={"color": _RED, "dash": "dash"},
        annotation_text="threshold",
        annotation_position="top left",
    )
    if rule.warning_threshold is not None:
        fig.add_hline(
            y=rule.warning_threshold,
            line={"color": _ORANGE, "dash": "dot"},
            annotation_text="warning",
            annotation_position="bottom left",
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
    fig = go.Figure()
    hour = timedelta(hours=1)
    for model in shown:
        points = history[model]
        fig.add_trace(
            go.Scatter(
                x=[t + hour for t, _, _ in points],
                y=[current for _, current, _ in points],
                mode="lines",
                line={"shape": "hv"},
                name=_label(model, rule),
            )
        )
    marks = [
        (t + hour, peak)
        for model in shown
        for t, _, peak in history[model]
        if level(float(peak)) is not None
    ]
    fig.add_trace(
        go.Scatter(
            x=[t for t, _ in marks],
            y=[peak for _, peak in marks],
            mode="markers",
            name="would fire",
            marker={"color": _RED, "size": 7, "symbol": "x"},
        )
    )
    note = (
        "Streaks are folded by the hour: each line is a model's streak at the end of each hour, "
        "a marker an hour in which it reached the threshold (the rule's for-duration is not "
        "applied at this resolution)."
    )
    if len(models) > len(shown):
        note += f" Showing the {len(shown)} highest of {len(models)} models."
    return _preview(
        fig, rule, hours, "contract-broken streak", fired, len(shown), len(models), note
    )

"""What a rule would have done over the past day, as a Plotly figure (DESIGN §7).

The metric is folded from minute rollups exactly as the engine folds it, slid over the day one
minute at a time, and replayed through the same state machine from an all-ok start, ignoring
pause and silence. The figure draws each group's value, the threshold (and warning threshold),
and a marker wherever the rule would have been firing. Streaks are kept as current values only,
so a streak rule's preview is each model's current streak against the threshold.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import plotly.graph_objects as go
from django.utils import timezone

from alerts.evaluate import FIRING, TRANSITION, Sample, replay
from alerts.models import Rule, rule_errors
from alerts.windows import STREAK, RowIndex, fold_by_minute, read_rows, slide, window_start
from records.models import Grain, Streak
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
    errors = rule_errors(
        metric=rule.metric,
        agent=rule.agent,
        model=rule.model,
        classifier=rule.classifier,
        kind=rule.kind,
        match=rule.match,
        group_by=rule.group_by,
        comparator=rule.comparator,
        threshold=rule.threshold,
        warning_threshold=rule.warning_threshold,
        window_minutes=rule.window_minutes,
    )
    if errors:
        raise ValueError(f"the rule cannot be previewed: {errors}")
    now = now or timezone.now()
    if rule.metric == STREAK:
        return _streak_preview(rule)
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
    _thresholds(fig, rule)
    fig.update_layout(
        height=340,
        margin={"l": 50, "r": 20, "t": 30, "b": 40},
        xaxis={"title": {"text": "time (UTC)"}},
        yaxis={"title": {"text": rule.metric_label}},
        legend={"orientation": "h", "y": -0.2},
        title={"text": f"{rule.describe()}: past {hours} h", "font": {"size": 13}},
    )
    note = ""
    if len(groups) > len(shown):
        note = f"Showing the {len(shown)} busiest of {len(groups)} groups."
    return Preview(
        figure=json.loads(fig.to_json()),
        fired=fired,
        groups_shown=len(shown),
        groups_total=len(groups),
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


def _streak_preview(rule: Rule) -> Preview:
    streaks = Streak.objects.filter(project_id=rule.project_id).order_by("-current", "model")
    if rule.model:
        streaks = streaks.filter(model=rule.model)
    if rule.classifier:
        streaks = streaks.filter(model=rule.classifier)
    rows = list(streaks.values_list("model", "current")[:40])
    level = rule.condition().level
    breaching = [m for m, current in rows if level(float(current)) is not None]
    fig = go.Figure(
        go.Bar(
            x=[html.escape(m) for m, _ in rows],
            y=[current for _, current in rows],
            marker={"color": [_RED if m in breaching else "#3a5bd9" for m, _ in rows]},
            name="current streak",
        )
    )
    _thresholds(fig, rule)
    fig.update_layout(
        height=340,
        margin={"l": 50, "r": 20, "t": 30, "b": 80},
        yaxis={"title": {"text": "current contract-broken streak"}},
        title={"text": rule.describe(), "font": {"size": 13}},
    )
    return Preview(
        figure=json.loads(fig.to_json()),
        fired=[(timezone.now(), m, None) for m in breaching],
        groups_shown=len(rows),
        groups_total=len(rows),
        note="Streaks are kept as current values: this shows each model's streak now.",
    )

"""Figures of the tools, selection-accuracy and narrowing what-if pages, in the house style of
dashboard.charts.plotting (whose helpers build and validate the traces). Tool, model and agent
names are data, passed through plotting.plain so that plotly.js shows them as typed."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from dashboard.charts.category_charts import bars
from dashboard.charts.plotting import (
    PALETTE,
    Figure,
    build_figure,
    build_trace,
    palette_colour,
    plain,
    when,
)
from dashboard.queries.tool_definition_cost import Saving
from records.contract.rollup_keys import model_label
from records.metrics.definitions import Calibration
from records.metrics.tool_stats import ToolStats, WhatIf


def funnel(stats: ToolStats) -> Figure:
    """Offered → ranked → served → chosen → called, as bars; a stage its sources did not report
    is named "not reported" on its axis label and drawn as no bar, never as a zero."""
    stages = stats.funnel()
    labels = [label if n is not None else f"{label} (not reported)" for label, n in stages]
    return bars(labels, [n for _, n in stages], ytitle="decisions")


def over_time(series: Sequence[tuple[datetime, ToolStats]]) -> Figure:
    """A tool's offered, served, narrowed-out and called counts per bucket."""
    lines = (
        ("offered", lambda s: s.offered),
        ("served", lambda s: s.served),
        ("narrowed out", lambda s: s.narrowed_out),
        ("called", lambda s: s.offered_called),
        ("missed", lambda s: s.missed),
    )
    traces = [
        build_trace(
            "Scatter",
            {"x": [when(t) for t, _ in series], "y": [get(s) for _, s in series], "name": label},
            mode="lines+markers" if len(series) < 3 else "lines",
            line={"color": palette_colour(i), "width": 2},
            hovertemplate="%{y:,}",
        )
        for i, (label, get) in enumerate(lines)
    ]
    return build_figure(traces, ytitle="picks")


def rates(groups: dict[str, list[tuple]], *, models: bool) -> Figure:
    """One line per group ([(t, value, count)]), on a percentage axis. A group of rows that
    named no classifier model is counted in the tables, never drawn."""
    traces = [
        build_trace(
            "Scatter",
            {
                "x": [when(t) for t, _, c in points if c],
                "y": [value for _, value, c in points if c],
                "customdata": [c for _, _, c in points if c],
                "name": plain(model_label(group) if models else group or "(no agent)"),
            },
            mode="lines+markers" if len(points) < 3 else "lines",
            line={"color": palette_colour(i), "width": 2},
            hovertemplate="%{y:.1%} (n=%{customdata})",
        )
        for i, (group, points) in enumerate(groups.items())
        if group or not models
    ]
    return build_figure(traces, ytitle="share", yformat=".0%")


def reliability(calibration: dict[str, Calibration]) -> Figure:
    """The reliability diagram: per classifier model, each confidence bin's mean confidence
    against the agreement observed in it; the diagonal is a perfectly calibrated classifier."""
    traces = [
        build_trace(
            "Scatter",
            {"x": [0, 1], "y": [0, 1], "name": "perfectly calibrated"},
            mode="lines",
            line={"color": "#98a2b3", "width": 1, "dash": "dash"},
            hoverinfo="skip",
        )
    ]
    for i, (model, cal) in enumerate(m for m in calibration.items() if m[0]):
        bins = cal.reliability()
        traces.append(
            build_trace(
                "Scatter",
                {
                    "x": [conf for _, _, _, conf in bins],
                    "y": [agree for _, _, agree, _ in bins],
                    "customdata": [n for _, n, _, _ in bins],
                    "name": plain(model_label(model)),
                },
                mode="lines+markers",
                line={"color": PALETTE[i % len(PALETTE)], "width": 2},
                hovertemplate="confidence %{x:.2f}: agreement %{y:.1%} (n=%{customdata})",
            )
        )
    return build_figure(traces, time_axis=False, xtitle="confidence (mean of bin)",
                        ytitle="observed first-pick agreement", yformat=".0%",
                        height=320)  # fmt: skip


def whatif(groups: dict[str, WhatIf], *, cost: bool) -> Figure:
    """Per group, the miss rate (or the mean tool definitions served) at each top-N."""
    traces = [
        build_trace(
            "Scatter",
            {
                "x": [n for n, _, _ in w.points],
                "y": [served if cost else missed for _, missed, served in w.points],
                "name": plain(label),
            },
            mode="lines+markers",
            line={"color": palette_colour(i), "width": 2},
            hovertemplate="top %{x}: %{y" + (":.1f} tools" if cost else ":.1%} missed"),
        )
        for i, (label, w) in enumerate(groups.items())
        if w.points
    ]
    return build_figure(traces, time_axis=False, xtitle="serve: { top: N }",
                        ytitle="tools served per call" if cost else "called tool narrowed out",
                        yformat="" if cost else ".0%", height=300)  # fmt: skip


def savings(saved: Sequence[Saving]) -> Figure:
    """USD saved against the full set at each top-N (points not estimated left out)."""
    shown = [s for s in saved if s.nano is not None]
    trace = build_trace(
        "Scatter",
        {"x": [s.n for s in shown], "y": [s.nano / 1e9 for s in shown], "name": "saved"},
        mode="lines+markers",
        line={"color": palette_colour(0), "width": 2},
        hovertemplate="top %{x}: $%{y:,.4f} saved",
    )
    return build_figure([trace], time_axis=False, xtitle="serve: { top: N }",
                        ytitle="input spend saved (USD)", height=300)  # fmt: skip

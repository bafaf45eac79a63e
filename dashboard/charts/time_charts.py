"""Charts over time: the page's period on the x axis (records by kind, latencies, rates,
counts per bucket, a streak hour by hour, a run's records as bars from their timestamps)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from dashboard.charts.plotting import (
    Figure,
    build_figure,
    build_trace,
    kind_colour,
    palette_colour,
    plain,
    series_lines,
    when,
)


def records_by_kind(series: Sequence[dict]) -> Figure:
    traces = [
        build_trace(
            "Bar",
            {
                "x": [when(p["t"]) for p in s["points"]],
                "y": [p["value"] for p in s["points"]],
                "name": plain(s["group"].get("kind", "")),
            },
            marker={"color": kind_colour(s["group"].get("kind", ""))},
            hovertemplate="%{y:,}",
        )
        for s in series
    ]
    return build_figure(traces, ytitle="records", barmode="stack")


def spend_by_model(by_model: dict[str, Sequence[tuple[datetime, int]]]) -> Figure:
    """Spend per bucket stacked by model ({model: [(bucket, nano-USD)]}), in USD."""
    traces = [
        build_trace(
            "Bar",
            {
                "x": [when(t) for t, _ in points],
                "y": [nano / 1e9 for _, nano in points],
                "name": plain(model),
            },
            marker={"color": palette_colour(i)},
            hovertemplate="$%{y:,.4f}",
        )
        for i, (model, points) in enumerate(by_model.items())
    ]
    return build_figure(traces, ytitle="USD", barmode="stack")


def latency_by_model(series: Sequence[dict]) -> Figure:
    return build_figure(series_lines(series), ytitle="ms")


def rates_over_time(rates: dict[str, list[tuple]], labels: dict[str, str]) -> Figure:
    """Several overall rates ([(t, value, count)] each) as lines on one percentage axis."""
    traces = [
        build_trace(
            "Scatter",
            {
                "x": [when(t) for t, _, _ in points],
                "y": [value for _, value, _ in points],
                "customdata": [count for _, _, count in points],
                "name": labels.get(name, name),
            },
            mode="lines+markers" if len(points) < 3 else "lines",
            line={"color": palette_colour(i), "width": 2},
            hovertemplate="%{y:.1%} (n=%{customdata})",
        )
        for i, (name, points) in enumerate(rates.items())
    ]
    return build_figure(traces, ytitle="share", yformat=".0%")


def percent_lines(series: Sequence[dict], ytitle: str = "share") -> Figure:
    return build_figure(series_lines(series, percent=True), ytitle=ytitle, yformat=".0%")


_DASHES = {0: "dot", 1: "solid", 2: "dash"}


def classifier_latency(latency: dict[str, list[tuple]]) -> Figure:
    """p50 (dotted), p95 (solid) and p99 (dashed) per classifier model over time."""
    traces = []
    drawn = [(model, points) for model, points in latency.items() if model]  # see series_lines
    for i, (model, points) in enumerate(drawn):
        for q_index, q in enumerate(("p50", "p95", "p99")):
            traces.append(
                build_trace(
                    "Scatter",
                    {
                        "x": [when(p[0]) for p in points],
                        "y": [p[1 + q_index] for p in points],
                        "name": f"{plain(model)} {q}",
                        "legendgroup": plain(model),
                    },
                    mode="lines+markers" if len(points) < 3 else "lines",
                    line={"color": palette_colour(i), "dash": _DASHES[q_index], "width": 2},
                    hovertemplate="%{y:,.0f} ms",
                )
            )
    return build_figure(traces, ytitle="ms", height=300)


def counts_over_time(series: Sequence[tuple[str, Sequence[tuple[datetime, int]]]], *,
                     ytitle: str = "") -> Figure:  # fmt: skip
    """Stacked bars of counts per bucket, one trace per (name, [(bucket, count)])."""
    traces = [
        build_trace(
            "Bar",
            {"x": [when(t) for t, _ in points], "y": [n for _, n in points], "name": plain(name)},
            marker={"color": palette_colour(i)},
            hovertemplate="%{y:,}",
        )
        for i, (name, points) in enumerate(series)
    ]
    return build_figure(traces, ytitle=ytitle, barmode="stack")


def sparkline(points: Sequence[tuple[datetime, int, int]]) -> Figure:
    """A streak hour by hour: bars for the highest it reached, a line for where it ended."""
    x = [when(t) for t, _, _ in points]
    peak = build_trace(
        "Bar",
        {"x": x, "y": [p for _, _, p in points]},
        name="highest in the hour",
        marker={"color": "rgba(192,57,43,0.25)"},
        hovertemplate="%{x|%m-%d %H:00}: up to %{y}<extra></extra>",
    )
    end = build_trace(
        "Scatter",
        {"x": x, "y": [e for _, e, _ in points]},
        name="at the end of the hour",
        mode="lines",
        line={"color": "#c0392b", "width": 1.5, "shape": "hv"},
        hovertemplate="%{x|%m-%d %H:00}: %{y} at the end<extra></extra>",
    )
    figure = build_figure([peak, end], sparkline=True, height=36)
    figure["layout"] = {**figure["layout"], "bargap": 0.1}
    return figure


def run_latencies(items: Sequence[Any]) -> Figure:
    """Each timed record (dashboard.queries.timeline.Item) as a bar from its ts, one lane per
    kind."""
    lanes: dict[str, list[Any]] = {}
    for item in items:
        if item.latency_ms is not None:
            lanes.setdefault(item.kind, []).append(item)
    traces = [
        build_trace(
            "Bar",
            {
                "base": [when(i.ts) for i in lane],
                "x": [i.latency_ms for i in lane],
                "y": [kind] * len(lane),
                "customdata": [[i.iteration_label, plain(i.model or "")] for i in lane],
                "name": kind,
            },
            orientation="h",
            marker={"color": kind_colour(kind)},
            hovertemplate="%{x:,.0f} ms · iteration %{customdata[0]} · "
            "%{customdata[1]}<extra>%{fullData.name}</extra>",
        )
        for kind, lane in sorted(lanes.items())
    ]
    return build_figure(
        traces,
        legend=False,
        horizontal=True,
        left=120,
        barmode="overlay",
        height=max(160, 50 + 34 * len(lanes)),
    )

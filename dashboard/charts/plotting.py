"""The building blocks of every chart: the house colours, traces and layouts validated by
plotly, the time-axis helpers, and record text made safe to show.

Speed: plotly validates every property of a go.Figure and of each go.Scatter as it builds them, a
page draws up to thirty traces, and the pages have a 150 ms budget (bench/pages.py). So what
plotly.graph_objects validates is the part that can be wrong, the style (trace type, mode, line,
marker, hover template): each distinct style is validated once (go.Scatter(**style), cached) and the
data arrays (x, y, names) are added to a copy. Each chart's layout is validated the same way
(go.Layout, cached).

Record text (model, tool and agent names) goes into the figure as data: plotly.js sets it as SVG
text, never as markup, and the JSON travels in a `json_script` element, never as page markup.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any, Protocol

import orjson
import plotly.graph_objects as go

from records.contract.rollup_keys import (
    MODEL_CALL,
    NOTICE,
    OUTCOME,
    PICK,
    PICK_ERROR,
    PROVIDER_ERROR,
    RELIABILITY,
    SELECTION,
    TURN,
    VERDICT,
    model_label,
)

PALETTE = ("#3a5bd9", "#e8833a", "#2e9e6b", "#c0392b", "#8e6bbf", "#8c6d31", "#d45fa8",
           "#6c7a89", "#17a2b8", "#b8a000")  # fmt: skip
# One colour per record kind on every chart (records by kind, a run's latency lanes).
KIND_COLOURS = {
    PICK: "#3a5bd9",
    PICK_ERROR: "#c0392b",
    OUTCOME: "#8fa8f0",
    SELECTION: "#2e9e6b",
    TURN: "#8e6bbf",
    VERDICT: "#d45fa8",
    NOTICE: "#6c7a89",
    PROVIDER_ERROR: "#e8833a",
    RELIABILITY: "#b8a000",
    MODEL_CALL: "#17a2b8",
}
OTHER_KIND = "#8c6d31"
# The in-progress bucket: shaded, and its line segment dotted.
PARTIAL_FILL = "rgba(102,112,133,0.10)"
CHOSEN = "#3a5bd9"
SERVED = "#8fa8f0"
OFFERED = "#d0d5dd"
DOOR = "#e8833a"
# A release's line across a time chart, and its name hanging from the plot's top.
RELEASE_LINE = "#7a5af8"
# How far below the plot's top edge plotly.js's toolbar (2 px from the figure's top, 22 px
# buttons) reaches, with the layout's 12 px top margin, and a few pixels to spare.
TOOLBAR_CLEARANCE = 20
# The page that compares a release with what ran before it.
CHANGES_PATH = "/changes/"
Figure = dict[str, Any]


def when(t: datetime) -> str:
    """A UTC time as plotly.js reads it: no offset (it would shift it), the axes say UTC."""
    return t.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def plain(text: object) -> str:
    """Record text as plotly.js shows it literally.

    plotly.js reads a few HTML tags in labels and legends (<b>, <br>, <a href>); turning < > &
    into entities, which it decodes for display, makes a tool named "<b>x</b>" show as typed.
    """
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@lru_cache(maxsize=512)
def _style(trace_type: str, style: str) -> dict:
    return getattr(go, trace_type)(**orjson.loads(style)).to_plotly_json()


def build_trace(trace_type: str, data: dict, **style: Any) -> dict:
    """A go.<trace_type> trace: `style` validated by plotly (once per distinct style), `data`
    (arrays, names: the part that changes with every request) added as given."""
    out = dict(_style(trace_type, orjson.dumps(style, option=orjson.OPT_SORT_KEYS).decode()))
    for key, value in data.items():
        base = out.get(key)
        out[key] = (
            {**base, **value} if isinstance(value, dict) and isinstance(base, dict) else value
        )
    return out


@lru_cache(maxsize=64)
def build_layout(
    *,
    height: int = 260,
    ytitle: str = "",
    yformat: str = "",
    xtitle: str = "",
    barmode: str = "",
    time_axis: bool = True,
    legend: bool = True,
    sparkline: bool = False,
    horizontal: bool = False,
    left: int = 56,
    entries: int = 0,
) -> dict:
    if sparkline:
        layout = go.Layout(
            height=height,
            margin={"l": 0, "r": 0, "t": 2, "b": 2},
            showlegend=False,
            xaxis={"visible": False, "type": "date"},
            yaxis={"visible": False, "rangemode": "tozero"},
            paper_bgcolor="rgba(0,0,0,0)",
            plot_bgcolor="rgba(0,0,0,0)",
        )
        return layout.to_plotly_json()
    # The legend goes under the plot, in rows: on the right a dozen series (kinds, models)
    # scrolled out of sight and squeezed the plot on a narrow screen. The figure grows by the
    # rows it will take (about three entries a row on a half-width panel).
    rows = -(-entries // 3) if legend and entries > 1 else 0
    layout = go.Layout(
        height=height + 20 * rows,
        margin={"l": left, "r": 16, "t": 12, "b": 40},
        font={"family": "system-ui, -apple-system, Segoe UI, sans-serif", "size": 12},
        paper_bgcolor="white",
        plot_bgcolor="white",
        showlegend=legend,
        legend={
            "orientation": "h",
            "x": 0,
            "xanchor": "left",
            "y": -0.18 - (0.1 if xtitle or time_axis else 0),
            "yanchor": "top",
            "font": {"size": 11},
        },
        hovermode="x unified" if time_axis else "closest",
        xaxis={
            "type": "date" if time_axis else "-",
            "title": {"text": xtitle or ("time (UTC)" if time_axis else "")},
            "gridcolor": "#eef0f3",
            "automargin": True,
        },
        yaxis={
            "title": {"text": ytitle},
            "tickformat": yformat,
            "gridcolor": "#eef0f3",
            "rangemode": "tozero",
            "automargin": True,
        },
    )
    if barmode:
        layout.barmode = barmode
    if horizontal:
        layout.yaxis.autorange = "reversed"
        layout.yaxis.type = "category"
    return layout.to_plotly_json()


def build_figure(data: Iterable[dict], **layout: Any) -> Figure:
    traces = list(data)
    entries = sum(1 for t in traces if t.get("showlegend", True) is not False)
    return {"data": traces, "layout": build_layout(entries=entries, **layout)}


def is_empty(figure: Figure | None) -> bool:
    """Whether a figure has nothing to draw: then a page says so instead of drawing bare axes
    (plotly.js invents a range, such as the year 2000 on a time axis, for an empty trace)."""
    if not figure:
        return True
    for trace in figure.get("data") or ():
        for key in ("x", "y", "z", "values"):
            if trace.get(key):
                return False
        if (trace.get("link") or {}).get("value"):
            return False
    return True


def kind_colour(kind: str) -> str:
    return KIND_COLOURS.get(kind, OTHER_KIND)


class Release(Protocol):
    """A deploy marker as a chart draws it (dashboard.queries.release_lines.ReleaseLine)."""

    id: int
    time: datetime
    agent: str
    name: str


def over_period(
    figure: Figure,
    start: datetime,
    end: datetime,
    partial: tuple[datetime, datetime] | None,
    releases: Sequence[Release] = (),
) -> Figure:
    """A time chart spanning its page's whole period (plotly.js would zoom in to milliseconds
    around a single bucket), with the bucket still filling marked (mark_partial) and the
    releases that began in it drawn (mark_releases)."""
    if is_empty(figure):
        return figure
    layout = figure["layout"]
    xaxis = {**layout["xaxis"], "range": [when(start), when(end)]}
    figure = {**figure, "layout": {**layout, "xaxis": xaxis}}
    figure = mark_partial(figure, *partial) if partial else figure
    return mark_releases(figure, releases) if releases else figure


def changes_link(release: Release) -> str:
    """The comparison of a release with what its agent ran before it, by the marker's id: a
    release or agent name may hold any character, and plotly.js re-encodes an href's escapes of
    reserved characters (a `%3A` arrives as `%253A`), so no name can travel in the link."""
    return f"{CHANGES_PATH}?marker={release.id}"


def mark_releases(figure: Figure, releases: Sequence[Release]) -> Figure:
    """A dashed vertical line at each release's start, its name above the plot linking to the
    comparison with what ran before it (changes_link). The name is record text: escaped (plain)
    as any label. The link opens in the page (plotly.js opens a new tab unless told), and has no
    hover text: one makes plotly.js lay a box that takes the pointer over the name. The name
    hangs below TOOLBAR_CLEARANCE: plotly.js shows its toolbar over the plot's top right while
    the pointer is on the chart, and a name under it could not be clicked."""
    layout = dict(figure["layout"])
    shapes = list(layout.get("shapes") or ())
    annotations = list(layout.get("annotations") or ())
    for release in releases:
        x = when(release.time)
        shapes.append(
            {"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
             "line": {"color": RELEASE_LINE, "width": 1, "dash": "dash"}, "layer": "above"}
        )  # fmt: skip
        annotations.append(
            {"xref": "x", "yref": "paper", "x": x, "y": 1, "xanchor": "left", "yanchor": "top",
             "text": f'<a href="{changes_link(release)}" target="_self">{plain(release.name)}</a>',
             "yshift": -TOOLBAR_CLEARANCE, "showarrow": False, "textangle": -90,
             "font": {"size": 10, "color": RELEASE_LINE}}
        )  # fmt: skip
    layout["shapes"] = shapes
    layout["annotations"] = annotations
    return {**figure, "layout": layout}


def mark_partial(figure: Figure, start: datetime, end: datetime) -> Figure:
    """Draw the bucket [start, end), which is still filling, as partial: shaded and labelled
    "in progress", each line's last segment into it dotted, its bars paler."""
    if is_empty(figure):
        return figure
    x0 = when(start)
    traces = []
    for trace in figure["data"]:
        xs = trace.get("x") or []
        if not xs or xs[-1] != x0:
            traces.append(trace)
            continue
        if trace.get("type") == "bar":
            marker = dict(trace.get("marker") or {})
            marker["opacity"] = [1.0] * (len(xs) - 1) + [0.45]
            traces.append({**trace, "marker": marker})
            continue
        if len(xs) < 2:
            traces.append(trace)
            continue
        group = trace.get("legendgroup") or trace.get("name") or ""
        head = {k: (v[:-1] if k in ("x", "y", "customdata") else v) for k, v in trace.items()}
        tail = {k: (v[-2:] if k in ("x", "y", "customdata") else v) for k, v in trace.items()}
        tail["line"] = {**(trace.get("line") or {}), "dash": "dot"}
        tail["showlegend"] = False
        traces += [{**head, "legendgroup": group}, {**tail, "legendgroup": group}]
    layout = dict(figure["layout"])
    layout["shapes"] = [
        *(layout.get("shapes") or ()),
        {"type": "rect", "xref": "x", "yref": "paper", "x0": x0, "x1": when(end), "y0": 0,
         "y1": 1, "fillcolor": PARTIAL_FILL, "line": {"width": 0}, "layer": "below"},
    ]  # fmt: skip
    layout["annotations"] = [
        *(layout.get("annotations") or ()),
        {"xref": "x", "yref": "paper", "x": x0, "y": 1, "xanchor": "left", "yanchor": "bottom",
         "text": "in progress", "showarrow": False, "font": {"size": 10, "color": "#667085"}},
    ]  # fmt: skip
    return {"data": traces, "layout": layout}


def _label(group: dict) -> str:
    return " · ".join(_value_label(k, v) for k, v in group.items()) or "all"


def _value_label(name: str, value: Any) -> str:
    if name == "model":
        return plain(model_label(value))
    return plain(value) if value else f"(no {name})"


def _drawn(series: Sequence[dict]) -> list[dict]:
    """The series to draw as lines: a group of records that reported no model is counted in
    totals and told beside the chart, never a line that sets the chart's scale."""
    return [s for s in series if not ("model" in s["group"] and not s["group"]["model"])]


def palette_colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def series_lines(series: Sequence[dict], *, percent: bool = False) -> list[dict]:
    """API-shaped series ([{"group", "points": [{"t", "value", "count"}]}]) as lines (those of
    records that named no model left out: see _drawn)."""
    return [
        build_trace(
            "Scatter",
            {
                "x": [when(p["t"]) for p in s["points"]],
                "y": [p["value"] for p in s["points"]],
                "customdata": [p["count"] for p in s["points"]],
                "name": _label(s["group"]),
            },
            mode="lines+markers" if len(s["points"]) < 3 else "lines",
            line={"color": palette_colour(i), "width": 2},
            hovertemplate="%{y" + (":.1%" if percent else ":,.4~g") + "} (n=%{customdata})",
        )
        for i, s in enumerate(_drawn(series))
    ]

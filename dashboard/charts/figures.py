"""Plotly figures for the operator pages, built in Python from plain page data.

Each function takes what dashboard.queries.page_rollups or dashboard.queries.timeline returns and gives a figure as a
JSON-ready dict ({"data": [...], "layout": {...}}) that a page embeds with `json_script` and the
locally served plotly.js draws (static/dashboard/charts.js). Traces are plotly.graph_objects, so
a wrong property fails here, in Python, not silently in the browser.

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
from typing import Any

import orjson
import plotly.graph_objects as go

from alerts.preview import Preview
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

# One colour per series position, and the marks of the pick chart.
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


def _trace(trace_type: str, data: dict, **style: Any) -> dict:
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
def _layout(
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


def _figure(data: Iterable[dict], **layout: Any) -> Figure:
    traces = list(data)
    entries = sum(1 for t in traces if t.get("showlegend", True) is not False)
    return {"data": traces, "layout": _layout(entries=entries, **layout)}


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


def over_period(
    figure: Figure, start: datetime, end: datetime, partial: tuple[datetime, datetime] | None
) -> Figure:
    """A time chart spanning its page's whole period (plotly.js would zoom in to milliseconds
    around a single bucket), with the bucket still filling marked (mark_partial)."""
    if is_empty(figure):
        return figure
    layout = figure["layout"]
    xaxis = {**layout["xaxis"], "range": [when(start), when(end)]}
    figure = {**figure, "layout": {**layout, "xaxis": xaxis}}
    return mark_partial(figure, *partial) if partial else figure


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


def _colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _lines(series: Sequence[dict], *, percent: bool = False) -> list[dict]:
    """API-shaped series ([{"group", "points": [{"t", "value", "count"}]}]) as lines (those of
    records that named no model left out: see _drawn)."""
    return [
        _trace(
            "Scatter",
            {
                "x": [when(p["t"]) for p in s["points"]],
                "y": [p["value"] for p in s["points"]],
                "customdata": [p["count"] for p in s["points"]],
                "name": _label(s["group"]),
            },
            mode="lines+markers" if len(s["points"]) < 3 else "lines",
            line={"color": _colour(i), "width": 2},
            hovertemplate="%{y" + (":.1%" if percent else ":,.4~g") + "} (n=%{customdata})",
        )
        for i, s in enumerate(_drawn(series))
    ]


# --- overview ----------------------------------------------------------------------------------
def records_by_kind(series: Sequence[dict]) -> Figure:
    traces = [
        _trace(
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
    return _figure(traces, ytitle="records", barmode="stack")


def latency_by_model(series: Sequence[dict]) -> Figure:
    return _figure(_lines(series), ytitle="ms")


def rates_over_time(rates: dict[str, list[tuple]], labels: dict[str, str]) -> Figure:
    """Several overall rates ([(t, value, count)] each) as lines on one percentage axis."""
    traces = [
        _trace(
            "Scatter",
            {
                "x": [when(t) for t, _, _ in points],
                "y": [value for _, value, _ in points],
                "customdata": [count for _, _, count in points],
                "name": labels.get(name, name),
            },
            mode="lines+markers" if len(points) < 3 else "lines",
            line={"color": _colour(i), "width": 2},
            hovertemplate="%{y:.1%} (n=%{customdata})",
        )
        for i, (name, points) in enumerate(rates.items())
    ]
    return _figure(traces, ytitle="share", yformat=".0%")


# --- models ------------------------------------------------------------------------------------
def swap_matrix(matrix: dict[tuple[str, str], int]) -> Figure:
    """Heatmap of the swaps: default model (rows) → selected model (columns).

    Only swaps are coloured, each cell with its count and its share of the row's selections:
    the diagonal (the router kept the default) would otherwise set the colour scale, its
    hundreds hiding a real swap of twenty. Kept selections are written in the row's label.
    """
    defaults = sorted({d for d, _ in matrix})
    selected = sorted({s for d, s in matrix if s != d})
    if not selected:
        return {"data": [], "layout": _layout(time_axis=False, legend=False)}
    totals = {d: sum(n for (dd, _), n in matrix.items() if dd == d) for d in defaults}
    z = [[matrix.get((d, s), 0) if s != d else None for s in selected] for d in defaults]
    text = [
        [
            f"{v:,} · {v / totals[d]:.0%}" if v else ("—" if s == d else "")
            for s, v in zip(selected, row, strict=True)
        ]
        for d, row in zip(defaults, z, strict=True)
    ]
    rates = [
        [(v or 0) / totals[d] if totals[d] else 0 for v in row]
        for d, row in zip(defaults, z, strict=True)
    ]
    kept = {d: matrix.get((d, d), 0) for d in defaults}
    trace = _trace(
        "Heatmap",
        {
            "x": [plain(s) for s in selected],
            "y": [f"{plain(d)} (kept {kept[d]:,})" for d in defaults],
            "z": z,
            "text": text,
            "customdata": rates,
        },
        texttemplate="%{text}",
        colorscale=[[0, "#f4f6fb"], [1, "#3a5bd9"]],
        showscale=False,
        hoverongaps=False,
        xgap=2,
        ygap=2,
        hovertemplate="default %{y} → selected %{x}: %{z:,} swaps, "
        "%{customdata:.1%} of its selections<extra></extra>",
    )
    height = max(180, 60 + 44 * len(defaults))
    return _figure(
        [trace],
        height=height,
        time_axis=False,
        legend=False,
        xtitle="selected instead (swaps only)",
        ytitle="default model",
        left=140,
    )


def percent_lines(series: Sequence[dict], ytitle: str = "share") -> Figure:
    return _figure(_lines(series, percent=True), ytitle=ytitle, yformat=".0%")


def model_paths(paths: dict[tuple[str, str], int]) -> Figure:
    """Step-to-step model paths: a Sankey from the model of the previous step (or the run's
    start) to the model selected at this one. A model is a node on each side, so a router that
    stays on its model draws a straight band and a swap a crossing one."""
    sources = sorted({p for p, _ in paths})
    targets = sorted({t for _, t in paths})
    colours = {m: _colour(i) for i, m in enumerate(sorted({*sources, *targets}))}
    labels = [f"{plain(m)} →" for m in sources] + [f"→ {plain(m)}" for m in targets]
    edges = sorted(paths.items())
    trace = _trace(
        "Sankey",
        {
            "node": {
                "label": labels,
                "color": [colours[m] for m in sources] + [colours[m] for m in targets],
            },
            "link": {
                "source": [sources.index(p) for (p, _), _ in edges],
                "target": [len(sources) + targets.index(t) for (_, t), _ in edges],
                "value": [n for _, n in edges],
                "color": [
                    "rgba(58,91,217,0.18)" if p != t else "rgba(102,112,133,0.14)"
                    for (p, t), _ in edges
                ],
            },
        },
        arrangement="fixed",
        node={
            "pad": 14,
            "thickness": 14,
            "hovertemplate": "%{label}: %{value:,} steps<extra></extra>",
        },
        link={"hovertemplate": "%{source.label} %{target.label}: %{value:,} steps<extra></extra>"},
    )
    return _figure([trace], time_axis=False, legend=False, height=max(260, 40 + 40 * len(targets)))


def refusals(refused: dict[tuple[str, str], int]) -> Figure:
    """Refused forced tool choices: one bar per model, coloured by provider."""
    providers = sorted({p for p, _ in refused})
    traces = []
    for i, provider in enumerate(providers):
        models = sorted(m for p, m in refused if p == provider)
        traces.append(
            _trace(
                "Bar",
                {
                    "x": [plain(m) for m in models],
                    "y": [refused[(provider, m)] for m in models],
                    "name": plain(provider),
                },
                marker={"color": _colour(i)},
                hovertemplate="%{x}: %{y:,}",
            )
        )
    return _figure(traces, time_axis=False, ytitle="refusals", height=240)


# --- classifiers -------------------------------------------------------------------------------
_DASHES = {0: "dot", 1: "solid", 2: "dash"}


def classifier_latency(latency: dict[str, list[tuple]]) -> Figure:
    """p50 (dotted), p95 (solid) and p99 (dashed) per classifier model over time."""
    traces = []
    drawn = [(model, points) for model, points in latency.items() if model]  # see _drawn
    for i, (model, points) in enumerate(drawn):
        for q_index, q in enumerate(("p50", "p95", "p99")):
            traces.append(
                _trace(
                    "Scatter",
                    {
                        "x": [when(p[0]) for p in points],
                        "y": [p[1 + q_index] for p in points],
                        "name": f"{plain(model)} {q}",
                        "legendgroup": plain(model),
                    },
                    mode="lines+markers" if len(points) < 3 else "lines",
                    line={"color": _colour(i), "dash": _DASHES[q_index], "width": 2},
                    hovertemplate="%{y:,.0f} ms",
                )
            )
    return _figure(traces, ytitle="ms", height=300)


def bars(labels: Sequence[str], values: Sequence[float], *, percent: bool = False,
         ytitle: str = "", counts: Sequence[int] | None = None) -> Figure:  # fmt: skip
    data: dict[str, Any] = {"x": [plain(label) for label in labels], "y": list(values)}
    if counts is not None:
        data["customdata"] = list(counts)
    trace = _trace(
        "Bar",
        data,
        marker={"color": PALETTE[0]},
        hovertemplate="%{x}: %{y" + (":.1%" if percent else ":,") + "}"
        + (" (n=%{customdata:,})" if counts is not None else "")
        + "<extra></extra>",
    )  # fmt: skip
    return _figure(
        [trace],
        time_axis=False,
        legend=False,
        ytitle=ytitle,
        yformat=".0%" if percent else "",
        height=240,
    )


def stacked(
    categories: Sequence[str], stacks: dict[str, Sequence[int]], *, ytitle: str = ""
) -> Figure:
    """Bars per category, stacked by the keys of `stacks` (e.g. verdicts per model)."""
    traces = [
        _trace(
            "Bar",
            {"x": [plain(c) for c in categories], "y": list(values), "name": plain(name)},
            marker={"color": _colour(i)},
            hovertemplate="%{x}: %{y:,} %{fullData.name}<extra></extra>",
        )
        for i, (name, values) in enumerate(stacks.items())
    ]
    return _figure(traces, time_axis=False, barmode="stack", ytitle=ytitle, height=260)


# --- streaks -----------------------------------------------------------------------------------
def sparkline(points: Sequence[tuple[datetime, int, int]]) -> Figure:
    """A streak hour by hour: bars for the highest it reached, a line for where it ended."""
    x = [when(t) for t, _, _ in points]
    peak = _trace(
        "Bar",
        {"x": x, "y": [p for _, _, p in points]},
        name="highest in the hour",
        marker={"color": "rgba(192,57,43,0.25)"},
        hovertemplate="%{x|%m-%d %H:00}: up to %{y}<extra></extra>",
    )
    end = _trace(
        "Scatter",
        {"x": x, "y": [e for _, e, _ in points]},
        name="at the end of the hour",
        mode="lines",
        line={"color": "#c0392b", "width": 1.5, "shape": "hv"},
        hovertemplate="%{x|%m-%d %H:00}: %{y} at the end<extra></extra>",
    )
    figure = _figure([peak, end], sparkline=True, height=36)
    figure["layout"] = {**figure["layout"], "bargap": 0.1}
    return figure


# --- one run -----------------------------------------------------------------------------------
def run_latencies(items: Sequence[Any]) -> Figure:
    """Each timed record (dashboard.queries.timeline.Item) as a bar from its ts, one lane per kind."""
    lanes: dict[str, list[Any]] = {}
    for item in items:
        if item.latency_ms is not None:
            lanes.setdefault(item.kind, []).append(item)
    traces = [
        _trace(
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
    return _figure(
        traces,
        legend=False,
        horizontal=True,
        left=120,
        barmode="overlay",
        height=max(160, 50 + 34 * len(lanes)),
    )


def ranked(pick: dict) -> Figure:
    """The ranked distribution of one pick, each tool marked chosen / served / offered / door.

    Ranked tools first (highest score first), then offered tools the classifier did not score,
    then the doors (always served, never ranked), each as its own legend entry.
    """
    chosen = pick.get("chosen")
    served = set(pick.get("served") or ())
    scores = {r["name"]: r["score"] for r in pick.get("ranked") or ()}
    names = [r["name"] for r in pick.get("ranked") or ()]
    names += [n for n in pick.get("offered") or () if n not in scores]
    doors = [n for n in pick.get("doors") or () if n not in scores]
    groups: dict[str, tuple[str, list[str]]] = {
        "chosen": (CHOSEN, [n for n in names if n == chosen]),
        "served": (SERVED, [n for n in names if n != chosen and n in served]),
        "offered, not served": (OFFERED, [n for n in names if n != chosen and n not in served]),
        "door (always served)": (DOOR, doors),
    }
    order = [plain(n) for n in names + doors]
    # Unscored tools and doors have no score: a short hatched stub shows their mark.
    stub = max([*scores.values(), 0.1]) * 0.04
    traces = []
    for label, (colour, members) in groups.items():
        if not members:
            continue
        traces.append(
            _trace(
                "Bar",
                {
                    "x": [plain(n) for n in members],
                    "y": [scores.get(n, stub) for n in members],
                    "customdata": [
                        f"{scores[n]:.3f}"
                        if n in scores
                        else ("door, not ranked" if n in doors else "not scored")
                        for n in members
                    ],
                    "text": [
                        f"{scores[n]:.2f}"
                        if n in scores
                        else ("door" if n in doors else "unscored")
                        for n in members
                    ],
                },
                textposition="outside",
                name=label,
                marker={
                    "color": colour,
                    "line": {"color": "#1d2330", "width": 1},
                    "pattern": {"shape": ["" if n in scores else "/" for n in members]},
                },
                hovertemplate="%{x}: %{customdata}<extra>%{fullData.name}</extra>",
            )
        )
    figure = _figure(traces, time_axis=False, ytitle="score", height=320)
    figure["layout"] = {
        **figure["layout"],
        "xaxis": {**figure["layout"]["xaxis"], "categoryorder": "array", "categoryarray": order},
    }
    return figure


# --- alert rule preview --------------------------------------------------------------------------
# Lines avoid the threshold's red and the warning's orange; "would fire" is a black cross, the
# colour of no line.
_PREVIEW_LINES = tuple(c for c in PALETTE if c not in ("#c0392b", "#e8833a"))
WOULD_FIRE = "#1d2330"


_THRESHOLD, _WARNING = "#c0392b", "#e8833a"


def alert_preview(preview: Preview, percent: bool) -> Figure:
    """A rule's preview (alerts.preview) in the house style: each group's line, the threshold
    and warning lines, and a cross wherever the rule would have been firing, in a colour no line
    has; rates on a percentage axis; the legend under the plot, clear of the axis title."""
    number = ":.1%" if percent else ":,.4~g"
    traces = [
        _trace(
            "Scatter",
            {"x": [when(t) for t in line.x], "y": line.y, "name": plain(line.label)},
            mode="lines",
            connectgaps=False,
            line={
                "color": _PREVIEW_LINES[i % len(_PREVIEW_LINES)],
                "width": 2,
                **({"shape": "hv"} if preview.steps else {}),
            },
            hovertemplate="%{y" + number + "}",
        )
        for i, line in enumerate(preview.lines)
    ]
    traces.append(
        _trace(
            "Scatter",
            {
                "x": [when(t) for t, _ in preview.would_fire],
                "y": [value for _, value in preview.would_fire],
                "name": "would fire",
            },
            mode="markers",
            marker={
                "color": WOULD_FIRE,
                "size": 9,
                "symbol": "x-thin",
                "line": {"width": 2, "color": WOULD_FIRE},
            },  # fmt: skip
            hovertemplate="would fire: %{y" + number + "}<extra></extra>",
        )
    )
    figure = _figure(traces, height=320, ytitle=preview.y_title, yformat=".0%" if percent else "")
    levels = [(preview.threshold, "threshold", _THRESHOLD, "dash")]
    if preview.warning is not None:
        levels.append((preview.warning, "warning", _WARNING, "dot"))
    figure["layout"] = {
        **figure["layout"],
        "shapes": [
            {
                "type": "line",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "yref": "y",
                "y0": y,
                "y1": y,
                "line": {"color": colour, "dash": dash, "width": 1.5},
            }
            for y, _, colour, dash in levels
        ],  # fmt: skip
        "annotations": [
            {
                "xref": "paper",
                "x": 0,
                "xanchor": "left",
                "yref": "y",
                "y": y,
                "yanchor": "bottom",
                "text": label,
                "showarrow": False,
                "font": {"color": colour, "size": 11},
            }
            for y, label, colour, _ in levels
        ],  # fmt: skip
    }
    return figure


# --- fallbacks (dashboard.views.fallbacks) --------------------------------------------------------------
def counts_over_time(series: Sequence[tuple[str, Sequence[tuple[datetime, int]]]], *,
                     ytitle: str = "") -> Figure:  # fmt: skip
    """Stacked bars of counts per bucket, one trace per (name, [(bucket, count)])."""
    traces = [
        _trace(
            "Bar",
            {"x": [when(t) for t, _ in points], "y": [n for _, n in points], "name": plain(name)},
            marker={"color": _colour(i)},
            hovertemplate="%{y:,}",
        )
        for i, (name, points) in enumerate(series)
    ]
    return _figure(traces, ytitle=ytitle, barmode="stack")


def fallback_funnel(runs: int, moved: int, causes: Sequence[tuple[str, int]]) -> Figure:
    """Runs of the range → runs that ended on another model → the events of each cause."""
    stages = [("runs in range", runs), ("runs on another model", moved)]
    labels = [plain(label) for label, _ in stages] + [plain(label) for label, _ in causes]
    values = [n for _, n in stages] + [n for _, n in causes]
    colours = [OFFERED, SERVED] + [_colour(i) for i in range(len(causes))]
    trace = _trace(
        "Funnel",
        {"y": labels, "x": values, "marker": {"color": colours}},
        textinfo="value",
        hovertemplate="%{y}: %{x:,}<extra></extra>",
    )
    return _figure([trace], time_axis=False, legend=False, left=260, height=300)

"""Charts over categories: models, tools, stages or verdicts on the x axis (bars, stacked bars,
the swap heatmap, the model-path Sankey, a pick's ranked distribution, the fallback funnel)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dashboard.charts.plotting import (
    CHOSEN,
    DOOR,
    OFFERED,
    PALETTE,
    SERVED,
    Figure,
    build_figure,
    build_layout,
    build_trace,
    palette_colour,
    plain,
)


def swap_matrix(matrix: dict[tuple[str, str], int]) -> Figure:
    """Heatmap of the swaps: default model (rows) → selected model (columns).

    Only swaps are coloured, each cell with its count and its share of the row's selections:
    the diagonal (the router kept the default) would otherwise set the colour scale, its
    hundreds hiding a real swap of twenty. Kept selections are written in the row's label.
    """
    defaults = sorted({d for d, _ in matrix})
    selected = sorted({s for d, s in matrix if s != d})
    if not selected:
        return {"data": [], "layout": build_layout(time_axis=False, legend=False)}
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
    trace = build_trace(
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
    return build_figure(
        [trace],
        height=height,
        time_axis=False,
        legend=False,
        xtitle="selected instead (swaps only)",
        ytitle="default model",
        left=140,
    )


def model_paths(paths: dict[tuple[str, str], int]) -> Figure:
    """Step-to-step model paths: a Sankey from the model of the previous step (or the run's
    start) to the model selected at this one. A model is a node on each side, so a router that
    stays on its model draws a straight band and a swap a crossing one."""
    sources = sorted({p for p, _ in paths})
    targets = sorted({t for _, t in paths})
    colours = {m: palette_colour(i) for i, m in enumerate(sorted({*sources, *targets}))}
    labels = [f"{plain(m)} →" for m in sources] + [f"→ {plain(m)}" for m in targets]
    edges = sorted(paths.items())
    trace = build_trace(
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
    return build_figure(
        [trace], time_axis=False, legend=False, height=max(260, 40 + 40 * len(targets))
    )


def refusals(refused: dict[tuple[str, str], int]) -> Figure:
    """Refused forced tool choices: one bar per model, coloured by provider."""
    providers = sorted({p for p, _ in refused})
    traces = []
    for i, provider in enumerate(providers):
        models = sorted(m for p, m in refused if p == provider)
        traces.append(
            build_trace(
                "Bar",
                {
                    "x": [plain(m) for m in models],
                    "y": [refused[(provider, m)] for m in models],
                    "name": plain(provider),
                },
                marker={"color": palette_colour(i)},
                hovertemplate="%{x}: %{y:,}",
            )
        )
    return build_figure(traces, time_axis=False, ytitle="refusals", height=240)


def bars(labels: Sequence[str], values: Sequence[float], *, percent: bool = False,
         ytitle: str = "", counts: Sequence[int] | None = None) -> Figure:  # fmt: skip
    data: dict[str, Any] = {"x": [plain(label) for label in labels], "y": list(values)}
    if counts is not None:
        data["customdata"] = list(counts)
    trace = build_trace(
        "Bar",
        data,
        marker={"color": PALETTE[0]},
        hovertemplate="%{x}: %{y" + (":.1%" if percent else ":,") + "}"
        + (" (n=%{customdata:,})" if counts is not None else "")
        + "<extra></extra>",
    )  # fmt: skip
    return build_figure(
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
        build_trace(
            "Bar",
            {"x": [plain(c) for c in categories], "y": list(values), "name": plain(name)},
            marker={"color": palette_colour(i)},
            hovertemplate="%{x}: %{y:,} %{fullData.name}<extra></extra>",
        )
        for i, (name, values) in enumerate(stacks.items())
    ]
    return build_figure(traces, time_axis=False, barmode="stack", ytitle=ytitle, height=260)


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
            build_trace(
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
    figure = build_figure(traces, time_axis=False, ytitle="score", height=320)
    figure["layout"] = {
        **figure["layout"],
        "xaxis": {**figure["layout"]["xaxis"], "categoryorder": "array", "categoryarray": order},
    }
    return figure


def fallback_funnel(runs: int, moved: int, causes: Sequence[tuple[str, int]]) -> Figure:
    """Runs of the range → runs that ended on another model → the events of each cause."""
    stages = [("runs in range", runs), ("runs on another model", moved)]
    labels = [plain(label) for label, _ in stages] + [plain(label) for label, _ in causes]
    values = [n for _, n in stages] + [n for _, n in causes]
    colours = [OFFERED, SERVED] + [palette_colour(i) for i in range(len(causes))]
    trace = build_trace(
        "Funnel",
        {"y": labels, "x": values, "marker": {"color": colours}},
        textinfo="value",
        hovertemplate="%{y}: %{x:,}<extra></extra>",
    )
    return build_figure([trace], time_axis=False, legend=False, left=260, height=300)

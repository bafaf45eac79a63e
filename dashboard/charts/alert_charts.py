"""The figure of an alert rule's preview (alerts.preview), drawn on the rule's form."""

from __future__ import annotations

from alerts.preview import Preview
from dashboard.charts.plotting import PALETTE, Figure, build_figure, build_trace, plain, when

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
        build_trace(
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
        build_trace(
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
    figure = build_figure(
        traces, height=320, ytitle=preview.y_title, yformat=".0%" if percent else ""
    )
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

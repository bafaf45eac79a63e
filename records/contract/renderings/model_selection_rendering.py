"""model_selection on the pages: the step's action and model; a swap moves the run (router)."""

from __future__ import annotations

from records.contract.fallback_causes import is_swap
from records.contract.renderings.kind_rendering import (
    ChainRole,
    CompareLane,
    Description,
    Move,
    Rendering,
    details,
    text_of,
)

MODEL = CompareLane("model", "model selected", 50)


def describe_selection(d: dict, der: dict) -> Description:
    default, selected = text_of(d.get("default_model")), text_of(d.get("selected_model"))
    title = f"step {text_of(d.get('step'))}: {text_of(d.get('action'))} on {selected}"
    if is_swap(default, selected):
        title += f" (swapped from {default})"
    patch = d.get("request_patch") or {}
    return title, details(
        ("previous", d.get("previous_model")),
        ("stop reason", d.get("stop_reason")),
        ("retry", "yes" if d.get("retry") else ""),
        ("request patch", ", ".join(sorted(patch)) if isinstance(patch, dict) else ""),
    )


def selection_lanes(d: dict, der: dict) -> list[tuple[CompareLane, str]]:
    default, selected = text_of(d.get("default_model")), text_of(d.get("selected_model"))
    text = f"{selected} (default {default})" if is_swap(default, selected) else selected
    return [(MODEL, f"{text}, {text_of(d.get('action'))}")]


class RouterSwap(ChainRole):
    """A selection of another model than the default: the router swapped it."""

    def move(self, data: dict) -> Move | None:
        if not is_swap(data.get("default_model"), data.get("selected_model")):
            return None
        why = [f"action {data.get('action')}"] if data.get("action") else []
        if data.get("previous_model"):
            why.append(f"previous {data['previous_model']}")
        if data.get("retry"):
            why.append("retry")
        if data.get("stop_reason"):
            why.append(f"stop {data['stop_reason']}")
        return Move(
            "router",
            text_of(data.get("default_model")),
            text_of(data.get("selected_model")),
            ", ".join(why),
        )


SELECTION_RENDERING = Rendering(describe_selection, selection_lanes, RouterSwap)

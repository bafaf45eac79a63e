"""tool_choice.pick_error on the pages: the failed classifier call, and the set served instead."""

from __future__ import annotations

from records.contract.renderings.kind_rendering import (
    CompareLane,
    Description,
    Rendering,
    details,
    millis,
    names_of,
    text_of,
)
from records.contract.renderings.tool_choice_pick_rendering import RANKED, SERVED


def describe_pick_error(d: dict, der: dict) -> Description:
    classifier = d.get("classifier") or {}
    status = f"{d.get('status')} " if d.get("status") is not None else ""
    title = f"classifier {text_of(classifier.get('model') or classifier.get('name'))} failed: "
    return title + f"{status}{text_of(d.get('message'))}", details(
        ("served", names_of(d.get("served"))),
        ("skip reason", d.get("narrowedSkipped")),
        ("latency", millis(d.get("latencyMs"))),
    )


def pick_error_lanes(d: dict, der: dict) -> list[tuple[CompareLane, str]]:
    return [
        (RANKED, f"pick error: {text_of(d.get('message'))}"),
        (SERVED, names_of(d.get("served"))),
    ]


PICK_ERROR_RENDERING = Rendering(describe_pick_error, pick_error_lanes, opens_pick=True)

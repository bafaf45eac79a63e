"""tool_choice.pick on the pages: the classifier's ranking, what was served and chosen."""

from __future__ import annotations

from typing import Any

from records.contract.renderings.kind_rendering import (
    CompareLane,
    Description,
    Rendering,
    details,
    millis,
    names_of,
    text_of,
)

# The lanes a pick fills; a pick error fills the first two in its place.
RANKED = CompareLane("ranked", "ranked", 10)
SERVED = CompareLane("served", "served", 20)
CHOSEN = CompareLane("chosen", "chosen", 30)


def describe_pick(d: dict, der: dict) -> Description:
    ranked = d.get("ranked") or []
    top = ranked[0] if ranked and isinstance(ranked[0], dict) else {}
    classifier = d.get("classifier") or {}
    title = f"{text_of(classifier.get('model'))} ranked {len(ranked)} tools"
    if d.get("chosen") is not None:
        title += f", chose {text_of(d.get('chosen'))}"
    else:
        title += ", chose nothing offered"
    narrowing = "narrowed" if d.get("narrowed") else "full set"
    if d.get("narrowedSkipped"):
        narrowing = f"not narrowed: {text_of(d.get('narrowedSkipped'))}"
    return title, details(
        ("top", f"{text_of(top.get('name'))} ({top.get('score')})" if top else ""),
        ("served", names_of(d.get("served"))),
        ("doors", names_of(der.get("doors"))),
        ("narrowing", narrowing),
        ("latency", millis(d.get("latencyMs"))),
        ("confidence", d.get("confidence")),
    )


def scored(values: Any) -> str:
    """A ranking as one line: each tool with its score."""
    if not isinstance(values, list):
        return ""
    return ", ".join(
        f"{text_of(v.get('name'))} {v.get('score')}" if isinstance(v, dict) else text_of(v)
        for v in values
    )


def pick_lanes(d: dict, der: dict) -> list[tuple[CompareLane, str]]:
    chosen = d.get("chosen")
    return [
        (RANKED, scored(d.get("ranked"))),
        (SERVED, names_of(d.get("served"))),
        (CHOSEN, text_of(chosen) if chosen is not None else "(nothing offered)"),
    ]


PICK_RENDERING = Rendering(describe_pick, pick_lanes, opens_pick=True)

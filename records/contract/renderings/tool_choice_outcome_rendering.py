"""tool_choice.outcome on the pages: what the model called, and whether the first pick agreed."""

from __future__ import annotations

from records.contract.renderings.kind_rendering import (
    CompareLane,
    Description,
    Rendering,
    details,
    names_of,
)

CALLED = CompareLane("called", "called", 40)


def describe_outcome(d: dict, der: dict) -> Description:
    called = names_of(d.get("called")) or "nothing"
    agrees = d.get("firstAgrees")
    verdict = {True: "first pick agreed", False: "first pick disagreed"}.get(agrees, "")
    miss = d.get("miss") or {}
    return f"called {called}", details(
        ("agreement", verdict), ("wanted, not served", names_of(miss.get("wanted")))
    )


def outcome_lanes(d: dict, der: dict) -> list[tuple[CompareLane, str]]:
    return [(CALLED, names_of(d.get("called")) or "(nothing)")]


OUTCOME_RENDERING = Rendering(describe_outcome, outcome_lanes)

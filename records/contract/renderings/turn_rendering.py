"""turn on the pages: the decision the harness saw on the wire, and the calls it made."""

from __future__ import annotations

from records.contract.renderings.kind_rendering import (
    CompareLane,
    Description,
    Rendering,
    details,
    millis,
    text_of,
)

TURNS = CompareLane("turns", "turns", 70)


def turn_calls(derived: dict) -> str:
    """A turn's derived calls as one line: what each did, an invented one marked so."""
    return ", ".join(
        text_of(c.get("action") or c.get("control") or c.get("wire"))
        + (" (invented)" if c.get("invented") else "")
        for c in derived.get("calls") or []
        if isinstance(c, dict)
    )


def describe_turn(d: dict, der: dict) -> Description:
    return f"turn: {text_of(der.get('decision'))}", details(
        ("protocol", der.get("protocol")),
        ("calls", turn_calls(der)),
        ("text", d.get("text")),
        ("finish", d.get("finishReason")),
        ("error", d.get("executionError")),
        ("duration", millis(d.get("durationMs"))),
    )


def turn_lanes(d: dict, der: dict) -> list[tuple[CompareLane, str]]:
    shown = turn_calls(der)
    return [(TURNS, text_of(der.get("decision")) + (f": {shown}" if shown else ""))]


TURN_RENDERING = Rendering(describe_turn, turn_lanes)

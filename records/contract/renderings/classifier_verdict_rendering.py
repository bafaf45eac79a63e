"""classifier.verdict on the pages: one classification attempt and its result; a first attempt on
rung 1 is a ladder walk that moved the classification off the seat."""

from __future__ import annotations

from collections import defaultdict

from records.contract.fallback_causes import is_ladder_fallback
from records.contract.renderings.kind_rendering import (
    ChainRole,
    CompareLane,
    Description,
    Move,
    Rendering,
    details,
    millis,
    text_of,
)

VERDICTS = CompareLane("verdicts", "verdicts", 60)


def result_of(d: dict) -> str:
    """The verdict when the classifier ruled, else the outcome (a timeout, a parse error ...)."""
    outcome = text_of(d.get("outcome"))
    return text_of(d.get("verdict")) if outcome == "ruled" else outcome


def describe_verdict(d: dict, der: dict) -> Description:
    extra = d.get("form") or d.get("cause") or ""
    title = f"{text_of(d.get('toolName'))}: {result_of(d)}{f' ({extra})' if extra else ''}"
    return title, details(
        ("model", f"{text_of(d.get('model'))} on rung {text_of(d.get('rung'))}"),
        (
            "seat",
            f"{text_of(d.get('seatModel'))} ({text_of(d.get('seat'))})"
            if d.get("seatModel")
            else "",
        ),
        ("re-ask", "yes" if d.get("reask") else ""),
        ("ladder fallback", "yes" if der.get("ladder_fallback") else ""),
        ("disposition", d.get("disposition")),
        ("wall", millis(d.get("wallMs"))),
    )


def verdict_lanes(d: dict, der: dict) -> list[tuple[CompareLane, str]]:
    return [
        (VERDICTS, f"{text_of(d.get('toolName'))}: {result_of(d)} on {text_of(d.get('model'))} "
                   f"(rung {text_of(d.get('rung'))}{', re-ask' if d.get('reask') else ''})")
    ]  # fmt: skip


class LadderWalk(ChainRole):
    """A classification that walked from the seat to the main model, once per toolCallId (at its
    first rung-1 attempt), with why the seat gave no ruling: the outcomes of the seat's first
    attempts (rung 0, not re-asks) at the same call."""

    def __init__(self) -> None:
        self.seat_attempts: dict[str, list[dict]] = defaultdict(list)
        self.walked: set[str] = set()

    def see(self, data: dict) -> None:
        if data.get("rung") == 0 and not data.get("reask"):
            self.seat_attempts[text_of(data.get("toolCallId"))].append(data)

    def move(self, data: dict) -> Move | None:
        if not is_ladder_fallback(data.get("rung"), data.get("reask")):
            return None
        call = text_of(data.get("toolCallId"))
        if call in self.walked:  # a later first attempt of the same classification
            return None
        self.walked.add(call)
        why = f"{data.get('toolName')}: " + self.seat_said(call)
        return Move("ladder", text_of(data.get("seatModel") or ""), text_of(data.get("model")), why)

    def seat_said(self, call: str) -> str:
        parts = []
        for d in self.seat_attempts.get(call, []):
            extra = d.get("form") or d.get("cause") or ""
            outcome = text_of(d.get("outcome"))
            parts.append(f"{outcome} ({extra})" if extra else outcome)
        return "seat " + ", ".join(parts) if parts else "no rung-0 attempt recorded"


VERDICT_RENDERING = Rendering(describe_verdict, verdict_lanes, LadderWalk)

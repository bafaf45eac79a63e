"""notice on the pages: the engine's message and detail; a fallback notice moves the run."""

from __future__ import annotations

from records.contract.fallback_causes import NOTICE_CAUSES
from records.contract.renderings.kind_rendering import (
    ChainRole,
    Description,
    Move,
    Rendering,
    details,
    text_of,
)


def describe_notice(d: dict, der: dict) -> Description:
    detail = d.get("detail") or {}
    shown = (
        ", ".join(f"{k}={text_of(v)}" for k, v in detail.items())
        if isinstance(detail, dict)
        else ""
    )
    return (
        f"{text_of(d.get('level') or 'notice')} {text_of(d.get('code'))}: "
        f"{text_of(d.get('message'))}",
        details(("detail", shown), ("audience", d.get("audience"))),
    )


class FallbackNotice(ChainRole):
    """A notice whose code is a fallback cause: the engine moved the run from one model (of a
    seat) to another."""

    def move(self, data: dict) -> Move | None:
        cause = NOTICE_CAUSES.get(data.get("code"))
        if cause is None:
            return None
        detail = data.get("detail") if isinstance(data.get("detail"), dict) else {}
        why = ", ".join(
            text_of(v) for v in (detail.get("cause"), data.get("message")) if v not in (None, "")
        )
        seat = f" (seat {detail['seat']})" if detail.get("seat") else ""
        return Move(cause, text_of(detail.get("from")) + seat, text_of(detail.get("to")), why)


NOTICE_RENDERING = Rendering(describe_notice, chain_role=FallbackNotice)

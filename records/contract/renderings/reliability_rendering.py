"""reliability on the pages: a retry, fallback or circuit event; a fallback moves the run."""

from __future__ import annotations

from records.contract.fallback_causes import RELIABILITY_FALLBACK
from records.contract.renderings.kind_rendering import (
    ChainRole,
    Description,
    Move,
    Rendering,
    details,
    text_of,
)

SHOWN = ("attempt", "fromProvider", "toProvider", "primary", "fallback", "errorKind",
         "recoveredVia", "state", "providerName", "reason")  # fmt: skip


def describe_reliability(d: dict, der: dict) -> Description:
    return f"reliability: {text_of(d.get('type'))}", details(*((k, d.get(k)) for k in SHOWN))


class ReliabilityFallback(ChainRole):
    """A fallback the reliability layer triggered: from the primary provider to its fallback."""

    def move(self, data: dict) -> Move | None:
        if data.get("type") != RELIABILITY_FALLBACK:
            return None
        why = ", ".join(
            f"{k} {data[k]}" for k in ("reason", "errorKind") if data.get(k) not in (None, "")
        )
        return Move(
            "reliability",
            text_of(data.get("primary") or data.get("fromProvider")),
            text_of(data.get("fallback") or data.get("toProvider")),
            why,
        )


RELIABILITY_RENDERING = Rendering(describe_reliability, chain_role=ReliabilityFallback)

"""The contract-broken streak of DESIGN §4 as a pure fold over verdicts in (ts, key) order."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

RULED = {"allow", "block"}


@dataclass
class StreakState:
    current: int = 0
    longest: int = 0
    last_broken_at: datetime | None = None


def advance(state: StreakState, verdicts: Iterable[tuple[str, datetime]]) -> StreakState:
    """Apply verdict classes (allow, block, parse_error, unavailable) with their ts, in order.

    A parse_error adds one, a ruling resets to zero, an unavailable classifier leaves it.
    """
    for verdict_class, ts in verdicts:
        if verdict_class == "parse_error":
            state.current += 1
            state.longest = max(state.longest, state.current)
            state.last_broken_at = ts
        elif verdict_class in RULED:
            state.current = 0
    return state

"""What a kind's rendering is: how the pages show one record of it, defined once per kind.

A rendering has up to three parts, each read by one page as a generic loop over
records.contract.kinds.KINDS:

- a description (every kind): the run page's one-line title and labelled details of a record;
- compare lanes (the kinds of a decision): the texts a record adds to the lanes of its iteration
  on the compare page, each lane declared once by the kind that owns it (CompareLane);
- a chain role (the kinds that can move a run to another model): a fresh ChainRole per run, which
  first `see`s every record of its kind in the run, then says where each one `move`d the run.

Renderings are plain functions of a record's `data` and `derived`. Values whose writing belongs to
the pages stay typed (a Millis is a duration the page writes its own way): records/ never imports
the dashboard.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Millis:
    """A duration in milliseconds, written by the page (dashboard.formatting.duration_ms)."""

    value: float


# A detail's value: text as shown, or a duration the page writes.
Detail = str | Millis
Description = tuple[str, list[tuple[str, Detail]]]


def text_of(value: Any) -> str:
    """A record's value as the page shows it: absent is empty, anything else its text."""
    return "" if value is None else str(value)


def names_of(values: Any) -> str:
    """A list of tools (names, or objects with a name) as one line of names."""
    if not isinstance(values, list):
        return ""
    return ", ".join(text_of(v.get("name") if isinstance(v, dict) else v) for v in values)


def millis(value: Any) -> Millis | None:
    """A duration field as a Millis, or None (not shown) when it is not a number."""
    return Millis(value) if isinstance(value, int | float) else None


def details(*pairs: tuple[str, Any]) -> list[tuple[str, Detail]]:
    """(label, value) pairs as details, dropping the empty ones; a Millis stays a Millis."""
    return [
        (label, value if isinstance(value, Millis) else text_of(value))
        for label, value in pairs
        if value not in (None, "", [], {})
    ]


@dataclass(frozen=True)
class CompareLane:
    """One lane of the compare page. `place` orders the lanes as a decision makes them."""

    name: str
    label: str
    place: int


@dataclass(frozen=True)
class Move:
    """Where one record moved a run: its cause (records.contract.fallback_causes.CAUSES), the
    model (or provider) configured, the one that served, and why."""

    cause: str
    configured: str
    served: str
    why: str


class ChainRole:
    """A kind's part in one run's fallback chain. One instance reads one run, in ts order: every
    record of the kind through `see` first, then each again through `move`."""

    def see(self, data: dict) -> None:
        """Take what a later `move` needs from the run's other records; most roles need none."""

    def move(self, data: dict) -> Move | None:
        raise NotImplementedError


@dataclass(frozen=True)
class Rendering:
    describe: Callable[[dict, dict], Description]
    lanes: Callable[[dict, dict], list[tuple[CompareLane, str]]] | None = None
    chain_role: Callable[[], ChainRole] | None = None
    # The record is a pick (or its failure): its timeline row links to the pick's drill-down.
    opens_pick: bool = False

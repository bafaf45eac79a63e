"""The contract-broken streak (docs/architecture.md, "Streaks"), as a monoid over verdict
segments.

Over one model's verdicts in (ts, key) order a parse_error adds one, a ruling (allow or block)
resets to zero and an unavailable classifier leaves the count alone. A `Segment` summarises a
stretch of that sequence so that two adjacent stretches combine without their verdicts:

- `prefix`: parse errors before the stretch's first ruling (all of them if it has none),
- `suffix`: parse errors after its last ruling (all of them if it has none),
- `longest`: the longest run of parse errors wholly inside it.

combine(L, R) is associative, so the workers keep one segment per model and minute, fold
minutes into hours and hours into days, and fold the days into the streak; a late verdict only
recomputes its own minute from the raw verdicts. The current streak is the suffix of the fold.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from datetime import datetime

RULED = frozenset({"allow", "block"})
BROKEN = "parse_error"


@dataclass(frozen=True, slots=True)
class Segment:
    has_ruling: bool = False
    prefix: int = 0
    suffix: int = 0
    longest: int = 0
    last_broken_at: datetime | None = None
    # The position of the stretch's last verdict, (ts, record key): a verdict that sorts before
    # it arrived late and the stretch must be recomputed.
    last_ts: datetime | None = None
    last_key: str = ""

    @property
    def current(self) -> int:
        return self.suffix

    @property
    def end(self) -> tuple:
        return (self.last_ts, self.last_key)


EMPTY = Segment()
# A segment's fields, which are also the StreakSegment model's columns for it.
FIELDS = tuple(f.name for f in fields(Segment))


def combine(left: Segment, right: Segment) -> Segment:
    if right.last_ts is None:
        return left
    if left.last_ts is None:
        return right
    broken = [t for t in (left.last_broken_at, right.last_broken_at) if t is not None]
    return Segment(
        has_ruling=left.has_ruling or right.has_ruling,
        prefix=left.prefix if left.has_ruling else left.prefix + right.prefix,
        suffix=right.suffix if right.has_ruling else left.suffix + right.suffix,
        longest=max(left.longest, right.longest, left.suffix + right.prefix),
        last_broken_at=max(broken) if broken else None,
        last_ts=right.last_ts,
        last_key=right.last_key,
    )


def of_verdict(verdict_class: str, ts: datetime, key: str) -> Segment:
    if verdict_class == BROKEN:
        return Segment(False, 1, 1, 1, ts, ts, key)
    if verdict_class in RULED:
        return Segment(True, 0, 0, 0, None, ts, key)
    return Segment(False, 0, 0, 0, None, ts, key)  # unavailable: leaves the streak as it is


def fold(segments: Iterable[Segment]) -> Segment:
    out = EMPTY
    for segment in segments:
        out = combine(out, segment)
    return out


def of_verdicts(verdicts: Iterable[tuple[str, datetime, str]]) -> Segment:
    """The segment of (verdict class, ts, key) triples, which must be in (ts, key) order:
    fold(of_verdict(*v) for v in verdicts), walked in one loop without a Segment per verdict
    (the catch-up recomputes dirty minutes from every verdict in them)."""
    has_ruling = False
    prefix = run = longest = 0
    last_broken_at = last_ts = None
    last_key = ""
    for verdict_class, ts, key in verdicts:
        last_ts, last_key = ts, key
        if verdict_class == BROKEN:
            run += 1
            if run > longest:
                longest = run
            if last_broken_at is None or ts > last_broken_at:
                last_broken_at = ts
        elif verdict_class in RULED:
            if not has_ruling:
                has_ruling, prefix = True, run
            run = 0
    if last_ts is None:
        return EMPTY
    return Segment(has_ruling, prefix if has_ruling else run, run, longest, last_broken_at,
                   last_ts, last_key)  # fmt: skip

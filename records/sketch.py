"""A mergeable quantile sketch with 1 % relative error (the DDSketch scheme, log-bucketed).

A positive value v falls in bin i = ceil(log_gamma(v)) with gamma = (1 + a) / (1 - a); every value
in a bin is within relative error a of the bin's representative 2 * gamma**i / (gamma + 1). Two
sketches merge by adding their bin counts, so minute rollups add up to hours and days exactly as
the raw values would. Values at or below MIN_POSITIVE (latencies of 0 ms) are counted apart.

The quantile q is the value of rank floor(q * (n - 1)) in sorted order (the lower nearest rank),
so the sketch's answer is within a of that element of the data.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

RELATIVE_ACCURACY = 0.01
GAMMA = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
_LOG_GAMMA = math.log(GAMMA)
MIN_POSITIVE = 1e-9


def bin_of(value: float) -> int | None:
    """The bin of a value, or None for the zero bin."""
    if value <= MIN_POSITIVE:
        return None
    return math.ceil(math.log(value) / _LOG_GAMMA)


def representative(index: int) -> float:
    return 2 * GAMMA**index / (GAMMA + 1)


class Sketch:
    __slots__ = ("bins", "zero")

    def __init__(self, bins: dict[int, int] | None = None, zero: int = 0):
        self.bins: dict[int, int] = bins if bins is not None else {}
        self.zero = zero

    def add(self, value: float, count: int = 1) -> None:
        index = bin_of(value)
        if index is None:
            self.zero += count
        else:
            self.bins[index] = self.bins.get(index, 0) + count

    def extend(self, values: Iterable[float]) -> None:
        for value in values:
            self.add(value)

    def merge(self, other: Sketch) -> None:
        self.zero += other.zero
        if not self.bins:  # the first merged into an empty one (every fold starts so): a copy
            self.bins = dict(other.bins)
            return
        bins = self.bins
        for index, count in other.bins.items():
            bins[index] = bins.get(index, 0) + count

    def merge_stored(self, data: dict | None) -> None:
        """merge(Sketch.from_json(data)), without building the Sketch between: the metrics API
        merges a stored sketch per rollup row read, thousands a request."""
        if not data:
            return
        bins = self.bins
        for key, count in data.items():
            if key == "z":
                self.zero += count
            else:
                index = int(key)
                bins[index] = bins.get(index, 0) + count

    @property
    def count(self) -> int:
        return self.zero + sum(self.bins.values())

    def quantile(self, q: float) -> float | None:
        if not 0 <= q <= 1:
            raise ValueError(f"quantile {q} is outside [0, 1]")
        n = self.count
        if n == 0:
            return None
        rank = math.floor(q * (n - 1))
        seen = self.zero
        if rank < seen:
            return 0.0
        for index in sorted(self.bins):
            seen += self.bins[index]
            if rank < seen:
                return representative(index)
        raise AssertionError("unreachable: rank below count")

    # Stored as one flat JSON object of counts, {"z": zero count, "<bin>": count, ...}, so that
    # the database merges two sketches by adding values key by key (records.sqlfunctions).
    def to_json(self) -> dict:
        out = {str(k): v for k, v in self.bins.items()}
        if self.zero:
            out["z"] = self.zero
        return out

    @classmethod
    def from_json(cls, data: dict | None) -> Sketch:
        sketch = cls()
        sketch.merge_stored(data)
        return sketch

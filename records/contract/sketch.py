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
    __slots__ = ("_bins", "_zero", "_stored")

    def __init__(self, bins: dict[int, int] | None = None, zero: int = 0):
        self._bins: dict[int, int] = bins if bins is not None else {}
        self._zero = zero
        # Stored sketches merged in (merge_stored) and not yet added to the bins: their counts
        # summed under the stored keys ("<bin>", "z"), turned into bins once, when read.
        self._stored: dict[str, int] | None = None

    @property
    def bins(self) -> dict[int, int]:
        if self._stored:
            self._settle()
        return self._bins

    @property
    def zero(self) -> int:
        if self._stored:
            self._settle()
        return self._zero

    @zero.setter
    def zero(self, value: int) -> None:
        if self._stored:
            self._settle()
        self._zero = value

    def add(self, value: float, count: int = 1) -> None:
        if self._stored:
            self._settle()
        index = bin_of(value)
        if index is None:
            self._zero += count
        else:
            bins = self._bins
            bins[index] = bins.get(index, 0) + count

    def extend(self, values: Iterable[float]) -> None:
        for value in values:
            self.add(value)

    def merge(self, other: Sketch) -> None:
        self.zero += other.zero
        if not self.bins:  # the first merged into an empty one (every fold starts so): a copy
            self._bins = dict(other.bins)
            return
        bins = self._bins
        for index, count in other.bins.items():
            bins[index] = bins.get(index, 0) + count

    def merge_stored(self, data: dict | None) -> None:
        """merge(Sketch.from_json(data)), without building the Sketch between: the metrics API
        merges a stored sketch per rollup row read, hundreds a request. Summed under the
        stored keys, and made bins (int keys) once, when the sketch is read: ~2.5x faster
        than an int() and a lookup per bin of every row."""
        if not data:
            return
        stored = self._stored
        if stored is None:
            self._stored = dict(data)  # a copy: the caller's dict stays as it is
            return
        get = stored.get
        for key, count in data.items():
            stored[key] = get(key, 0) + count

    def _settle(self) -> None:
        stored, self._stored = self._stored, None
        if not stored:
            return
        self._zero += stored.pop("z", 0)
        bins = self._bins
        if not bins:
            self._bins = {int(key): count for key, count in stored.items()}
            return
        for key, count in stored.items():
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
        bins = self.bins
        for index in sorted(bins):
            seen += bins[index]
            if rank < seen:
                return representative(index)
        raise AssertionError("unreachable: rank below count")

    # Stored as one flat JSON object of counts, {"z": zero count, "<bin>": count, ...}, so that
    # the database merges two sketches by adding values key by key (records.store.sqlfunctions).
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

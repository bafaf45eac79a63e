"""One rollup row's sums as a pass adds them up, before it writes them."""

from __future__ import annotations

from records.contract.sketch import Sketch


class Cell:
    """One rollup row's sums. The latency sketch comes with the first latency: most kinds carry
    none, and a sketch for every cell of a pass cost time and memory for nothing."""

    __slots__ = ("count", "tokens_in", "tokens_out", "latency_sum", "sketch", "cost_nano",
                 "cost_records", "cost_unknown")  # fmt: skip

    def __init__(self) -> None:
        self.count = 0
        self.tokens_in = 0
        self.tokens_out = 0
        self.latency_sum = 0.0
        self.sketch: Sketch | None = None
        # Spend in nano-USD, the records with usage, and those of them with no known price.
        self.cost_nano = 0
        self.cost_records = 0
        self.cost_unknown = 0

    def add_cost(self, nano: int | None) -> None:
        """One record with usage: its cost, or None when its price is unknown."""
        self.cost_records += 1
        if nano is None:
            self.cost_unknown += 1
        else:
            self.cost_nano += nano

    def add_latency(self, value: float) -> None:
        self.latency_sum += value
        if self.sketch is None:
            self.sketch = Sketch()
        self.sketch.add(value)

    def merge(self, other: Cell) -> None:
        self.count += other.count
        self.tokens_in += other.tokens_in
        self.tokens_out += other.tokens_out
        self.latency_sum += other.latency_sum
        self.cost_nano += other.cost_nano
        self.cost_records += other.cost_records
        self.cost_unknown += other.cost_unknown
        if other.sketch is not None:
            if self.sketch is None:
                self.sketch = Sketch()
            self.sketch.merge(other.sketch)

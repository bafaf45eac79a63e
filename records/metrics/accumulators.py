"""What a metric is made of: accumulators that turn rollup rows into a value and the number of
records behind it, and the `Metric` record that names a metric's kinds, groups and contribution
(records.metrics.definitions lists the metrics)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from records.contract.cost import NANO_PER_USD
from records.contract.sketch import Sketch
from records.metrics.reader import Row, merge_into


class Rate:
    """numerator / denominator; `count` is the denominator (the records behind the rate)."""

    def __init__(self) -> None:
        self.num = 0
        self.den = 0

    def add(self, num: int, den: int) -> None:
        self.num += num
        self.den += den

    def merge(self, other: Rate) -> None:
        self.add(other.num, other.den)

    def result(self) -> tuple[float | None, int]:
        return (self.num / self.den if self.den else None), self.den


class Total:
    def __init__(self) -> None:
        self.value = 0
        self.count = 0

    def add(self, value: int, count: int) -> None:
        self.value += value
        self.count += count

    def merge(self, other: Total) -> None:
        self.add(other.value, other.count)

    def result(self) -> tuple[float | None, int]:
        return self.value, self.count


class Quantile:
    def __init__(self, q: float) -> None:
        self.q = q
        self.sketch = Sketch()

    def add(self, sketch: Sketch | dict, _: int = 0) -> None:
        merge_into(self.sketch, sketch)

    def merge(self, other: Quantile) -> None:
        self.sketch.merge(other.sketch)

    def result(self) -> tuple[float | None, int]:
        value = self.sketch.quantile(self.q)
        return (round(value, 6) if value is not None else None), self.sketch.count


class Calibration:
    """Expected calibration error over confidence bins
    (records.catchup.tool_funnel.SELECTION_LINK rows): sum over bins of (decisions in the bin /
    decisions) * |observed agreement - mean confidence|; `count` is the decisions behind it
    (those whose outcome gave firstAgrees)."""

    is_rate = True  # a share in [0, 1]: alert rules read it as a rate (alerts.windows)

    def __init__(self) -> None:
        self.bins: dict[int, list[int]] = {}  # bin -> [decisions, agreeing, confidence in 1e-6]

    def add(self, bin_: int, n: int, agreeing: int, micro: int) -> None:
        cell = self.bins.setdefault(bin_, [0, 0, 0])
        cell[0] += n
        cell[1] += agreeing
        cell[2] += micro

    def merge(self, other: Calibration) -> None:
        for bin_, (n, agreeing, micro) in other.bins.items():
            self.add(bin_, n, agreeing, micro)

    def remove(self, other: Calibration) -> None:
        for bin_, (n, agreeing, micro) in other.bins.items():
            self.add(bin_, -n, -agreeing, -micro)

    def reliability(self) -> list[tuple[int, int, float, float]]:
        """[(bin, decisions, observed agreement, mean confidence)] of the bins with decisions."""
        return [
            (bin_, n, agreeing / n, micro / n / 1_000_000)
            for bin_, (n, agreeing, micro) in sorted(self.bins.items())
            if n
        ]

    def result(self) -> tuple[float | None, int]:
        total = sum(n for n, _, _ in self.bins.values())
        if not total:
            return None, 0
        error = sum(n / total * abs(agree - conf) for _, n, agree, conf in self.reliability())
        return round(error, 9), total


class Spend:
    """USD summed from rollup rows' nano-USD; `count` is the records with usage, `unknown`
    those of them with no known price. A group whose records all lack a price has no value
    (None), never a spend of zero."""

    def __init__(self) -> None:
        self.nano = 0
        self.count = 0
        self.unknown = 0

    def add(self, nano: int, count: int, unknown: int) -> None:
        self.nano += nano
        self.count += count
        self.unknown += unknown

    def merge(self, other: Spend) -> None:
        self.add(other.nano, other.count, other.unknown)

    def remove(self, other: Spend) -> None:
        self.add(-other.nano, -other.count, -other.unknown)

    def result(self) -> tuple[float | None, int]:
        all_unknown = self.count and self.count == self.unknown
        return (None if all_unknown else self.nano / NANO_PER_USD), self.count

    def extra(self) -> dict[str, int]:
        """What the API shows beside value and count."""
        return {"unknown": self.unknown}


class SpendPerRun:
    """Spend / runs (RUN_LAST rows: each run once, in the bucket of its last record); `count`
    is the runs, `unknown` the records with usage and no known price."""

    def __init__(self) -> None:
        self.spend = Spend()
        self.runs = 0

    def add(self, nano: int, count: int, unknown: int, runs: int) -> None:
        self.spend.add(nano, count, unknown)
        self.runs += runs

    def merge(self, other: SpendPerRun) -> None:
        self.spend.merge(other.spend)
        self.runs += other.runs

    def remove(self, other: SpendPerRun) -> None:
        self.spend.remove(other.spend)
        self.runs -= other.runs

    def result(self) -> tuple[float | None, int]:
        usd, _ = self.spend.result()
        if not self.runs or usd is None:
            return None, self.runs
        return usd / self.runs, self.runs

    def extra(self) -> dict[str, int]:
        return self.spend.extra()


# A contribution function maps one row to [(natural group, add-args)]; the accumulator's add()
# takes the add-args. Several contributions per row let one row feed several groups.
Contribution = Callable[[Row], Iterable[tuple[dict, tuple]]]


@dataclass(frozen=True)
class Metric:
    name: str
    kinds: tuple[str, ...]
    make: Callable[[], Any]
    contribute: Contribution
    group_bys: tuple[str, ...] = ("model", "agent")
    doc: str = ""
    # A group_by whose rows contribute differently, e.g. every pick feeds every skip reason.
    variants: tuple[tuple[str, Contribution], ...] = ()
    # Rows of these kinds feed every group of their bucket (the runs under each model's spend
    # per run), unless grouped by one of `shared_split`, which they carry themselves (agent).
    shared_kinds: tuple[str, ...] = ()
    shared_split: tuple[str, ...] = ()

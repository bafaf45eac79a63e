"""The statistics of a comparison: did the agent decide differently after (B) than before (A)?

Plain functions over counts and quantile sketches, for a page or an alert to call with what it
read from the rollups; docs/architecture.md ("Comparing two periods") states each method.

- **A proportion** (an error rate, a fallback rate): `compare_proportions` gives each side's
  rate with its Wilson score interval, the difference B − A with Newcombe's hybrid score
  interval (his method 10), and a two-sided p-value: the pooled two-proportion z-test, or
  Fisher's exact test when any cell of the 2×2 table expects fewer than 5 counts. With it, how
  many observations each side needs to detect the observed difference (`sample_size_needed`).
- **A distribution over categories** (the share of each tool among picks): `compare_categories`
  tests homogeneity with Pearson's chi-squared. Categories that expect fewer than 5 counts on
  either side are pooled into one "other" row; while the table still breaks Cochran's rule (a
  cell expecting fewer than 1, or more than a fifth of the cells fewer than 5), the smallest
  category left joins it. When that leaves two rows with a cell expecting fewer than 5,
  Fisher's exact test on the 2×2 instead.
- **A latency quantile** from two mergeable sketches (records.contract.sketch):
  `compare_quantiles` gives the difference of the q-quantiles with a percentile bootstrap
  interval and p-value. The bootstrap distribution is computed exactly, not by resampling: a
  resample of n values has its quantile at or below bin j exactly when at least rank + 1 of its
  values fall there, a binomial count, so each side's bootstrap quantile has a known
  distribution over its bins and the difference is their convolution. Deterministic, and as
  cheap for a million latencies as for a hundred; the sketch's 1 % relative error comes on top.
- **Many measures at once**: `benjamini_hochberg` turns the p-values of every measure of one
  comparison into q-values, so that "significant" means a false discovery rate of at most alpha
  over the comparison, not alpha per measure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from records.contract.sketch import Sketch, representative
from records.metrics.probability import (
    binomial_sf,
    chi2_sf,
    hypergeometric_pmf,
    normal_quantile,
    normal_sf,
)

ALPHA = 0.05
POWER = 0.8
# Below this expected count in a cell the chi-squared approximation is not trusted (Cochran).
MIN_EXPECTED = 5.0
# Fisher's two-sided test sums the tables no more likely than the observed one; this relative
# tolerance counts tables as likely as it despite rounding in the log-factorials.
_FISHER_TOLERANCE = 1 + 1e-7
# Bootstrap quantile probabilities below this are dropped from the convolution.
_NEGLIGIBLE = 1e-12

Test = Literal["z", "fisher", "chi-squared", "none"]


@dataclass(frozen=True, slots=True)
class Interval:
    low: float
    high: float

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


@dataclass(frozen=True, slots=True)
class ProportionChange:
    successes_a: int
    trials_a: int
    successes_b: int
    trials_b: int
    rate_a: float | None
    rate_b: float | None
    interval_a: Interval
    interval_b: Interval
    difference: float | None  # rate_b - rate_a
    difference_interval: Interval | None
    p_value: float
    test: Test
    # Observations each side needs for the observed difference to be found at ALPHA with
    # POWER; None when there is no difference to find.
    needed_per_side: int | None
    # How many more than the smaller side has (0 when both have enough).
    more_needed: int | None


@dataclass(frozen=True, slots=True)
class CategoryChange:
    categories: tuple[str, ...]  # the rows tested, in order; pooled ones are in `pooled`
    pooled: tuple[str, ...]  # categories merged into the last row ("other"), if any
    counts_a: tuple[int, ...]  # per row tested (the pooled row last)
    counts_b: tuple[int, ...]
    statistic: float | None  # chi-squared; None for Fisher's test or no test
    dof: int | None
    p_value: float
    test: Test


@dataclass(frozen=True, slots=True)
class QuantileChange:
    q: float
    value_a: float | None
    value_b: float | None
    difference: float | None  # value_b - value_a
    interval: Interval | None
    p_value: float


# --- proportions -----------------------------------------------------------------------------


def _z(confidence: float) -> float:
    return normal_quantile(1 - (1 - confidence) / 2)


def wilson_interval(successes: int, trials: int, *, confidence: float = 0.95) -> Interval:
    """The Wilson score interval of a proportion; [0, 1] with no trials."""
    if trials <= 0:
        return Interval(0.0, 1.0)
    z = _z(confidence)
    rate = successes / trials
    denominator = 1 + z * z / trials
    center = (rate + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(rate * (1 - rate) / trials + z * z / (4 * trials * trials)) / denominator
    return Interval(max(0.0, center - half), min(1.0, center + half))


def newcombe_interval(
    successes_a: int, trials_a: int, successes_b: int, trials_b: int, *, confidence: float = 0.95
) -> Interval:
    """Newcombe's hybrid score interval of rate_b - rate_a, from each side's Wilson interval."""
    rate_a, rate_b = successes_a / trials_a, successes_b / trials_b
    a = wilson_interval(successes_a, trials_a, confidence=confidence)
    b = wilson_interval(successes_b, trials_b, confidence=confidence)
    difference = rate_b - rate_a
    return Interval(
        difference - math.hypot(rate_b - b.low, a.high - rate_a),
        difference + math.hypot(b.high - rate_b, rate_a - a.low),
    )


def two_proportion_z_test(
    successes_a: int, trials_a: int, successes_b: int, trials_b: int
) -> float:
    """The two-sided p-value of the pooled two-proportion z-test."""
    pooled = (successes_a + successes_b) / (trials_a + trials_b)
    variance = pooled * (1 - pooled) * (1 / trials_a + 1 / trials_b)
    if variance <= 0:  # no successes or no failures on either side: nothing differs
        return 1.0
    z = (successes_b / trials_b - successes_a / trials_a) / math.sqrt(variance)
    return min(1.0, 2 * normal_sf(abs(z)))


def fisher_exact_test(successes_a: int, trials_a: int, successes_b: int, trials_b: int) -> float:
    """The two-sided p-value of Fisher's exact test of the 2×2 table: the probability, given
    the margins, of the tables no more likely than the observed one."""
    total = trials_a + trials_b
    successes = successes_a + successes_b
    if trials_a == 0 or trials_b == 0 or successes in (0, total):
        return 1.0
    observed = hypergeometric_pmf(successes_a, total, trials_a, successes)
    low, high = max(0, successes - trials_b), min(successes, trials_a)
    p = 0.0
    for k in range(low, high + 1):
        probability = hypergeometric_pmf(k, total, trials_a, successes)
        if probability <= observed * _FISHER_TOLERANCE:
            p += probability
    return min(1.0, p)


def _smallest_expected(table: Sequence[Sequence[int]]) -> float:
    rows = [sum(row) for row in table]
    columns = [sum(column) for column in zip(*table, strict=True)]
    total = sum(rows)
    return min(r * c / total for r in rows for c in columns)


def sample_size_needed(
    rate_a: float, rate_b: float, *, alpha: float = ALPHA, power: float = POWER
) -> int | None:
    """Observations per side for a two-sided two-proportion z-test at `alpha` to find a true
    difference rate_b - rate_a with probability `power` (the normal approximation without
    continuity correction, Fleiss's formula); None when the rates are equal."""
    difference = rate_b - rate_a
    if difference == 0:
        return None
    pooled = (rate_a + rate_b) / 2
    z_alpha = normal_quantile(1 - alpha / 2)
    z_power = normal_quantile(power)
    spread = z_alpha * math.sqrt(2 * pooled * (1 - pooled)) + z_power * math.sqrt(
        rate_a * (1 - rate_a) + rate_b * (1 - rate_b)
    )
    return math.ceil((spread / difference) ** 2)


def compare_proportions(
    successes_a: int,
    trials_a: int,
    successes_b: int,
    trials_b: int,
    *,
    confidence: float = 0.95,
    alpha: float = ALPHA,
    power: float = POWER,
) -> ProportionChange:
    """Everything a page says of one rate before (A) and after (B)."""
    for name, successes, trials in (("A", successes_a, trials_a), ("B", successes_b, trials_b)):
        if trials < 0 or not 0 <= successes <= trials:
            raise ValueError(f"side {name}: need 0 <= successes <= trials")
    interval_a = wilson_interval(successes_a, trials_a, confidence=confidence)
    interval_b = wilson_interval(successes_b, trials_b, confidence=confidence)
    rate_a = successes_a / trials_a if trials_a else None
    rate_b = successes_b / trials_b if trials_b else None
    if rate_a is None or rate_b is None:
        return ProportionChange(
            successes_a, trials_a, successes_b, trials_b, rate_a, rate_b, interval_a,
            interval_b, None, None, 1.0, "none", None, None,
        )  # fmt: skip
    table = ((successes_a, trials_a - successes_a), (successes_b, trials_b - successes_b))
    total_successes = successes_a + successes_b
    if 0 < total_successes < trials_a + trials_b and _smallest_expected(table) < MIN_EXPECTED:
        p_value, test = fisher_exact_test(successes_a, trials_a, successes_b, trials_b), "fisher"
    else:
        p_value, test = two_proportion_z_test(successes_a, trials_a, successes_b, trials_b), "z"
    needed = sample_size_needed(rate_a, rate_b, alpha=alpha, power=power)
    return ProportionChange(
        successes_a=successes_a,
        trials_a=trials_a,
        successes_b=successes_b,
        trials_b=trials_b,
        rate_a=rate_a,
        rate_b=rate_b,
        interval_a=interval_a,
        interval_b=interval_b,
        difference=rate_b - rate_a,
        difference_interval=newcombe_interval(
            successes_a, trials_a, successes_b, trials_b, confidence=confidence
        ),
        p_value=p_value,
        test=test,
        needed_per_side=needed,
        more_needed=None if needed is None else max(0, needed - min(trials_a, trials_b)),
    )


# --- distributions over categories -----------------------------------------------------------


def _cochran(kept, pooled, row_total, n_a: int, n_b: int) -> bool:
    """Cochran's rule for the table of the kept rows and the pooled one: no cell expects fewer
    than 1, and at most a fifth of the cells fewer than MIN_EXPECTED."""
    totals = [row_total(name) for name in kept] + [sum(row_total(name) for name in pooled)]
    total = n_a + n_b
    expected = [t * n / total for t in totals for n in (n_a, n_b)]
    small = sum(e < MIN_EXPECTED for e in expected)
    return min(expected) >= 1 and small <= len(expected) / 5


def chi_squared_statistic(table: Sequence[Sequence[int]]) -> float:
    """Pearson's statistic of a contingency table (rows × columns), without correction."""
    rows = [sum(row) for row in table]
    columns = [sum(column) for column in zip(*table, strict=True)]
    total = sum(rows)
    statistic = 0.0
    for row, row_total in zip(table, rows, strict=True):
        for observed, column_total in zip(row, columns, strict=True):
            expected = row_total * column_total / total
            statistic += (observed - expected) ** 2 / expected
    return statistic


def compare_categories(counts_a: Mapping[str, int], counts_b: Mapping[str, int]) -> CategoryChange:
    """Whether the shares of the categories differ between A and B (a homogeneity test)."""
    names = sorted(
        (name for name in {*counts_a, *counts_b} if counts_a.get(name, 0) + counts_b.get(name, 0)),
        key=lambda name: (-(counts_a.get(name, 0) + counts_b.get(name, 0)), name),
    )
    n_a = sum(counts_a.get(name, 0) for name in names)
    n_b = sum(counts_b.get(name, 0) for name in names)
    total = n_a + n_b
    if n_a == 0 or n_b == 0 or len(names) < 2:
        row = tuple(names)
        a = tuple(counts_a.get(name, 0) for name in row)
        b = tuple(counts_b.get(name, 0) for name in row)
        return CategoryChange(row, (), a, b, None, None, 1.0, "none")

    def smallest_expected(count: int) -> float:
        return count * min(n_a, n_b) / total

    def row_total(name: str) -> int:
        return counts_a.get(name, 0) + counts_b.get(name, 0)

    # names is largest first: the small ones are at its end.
    kept = [name for name in names if smallest_expected(row_total(name)) >= MIN_EXPECTED]
    pooled = names[len(kept) :]
    # Pool more, smallest first, while the table breaks Cochran's rule and rows remain to add.
    while pooled and len(kept) > 1 and not _cochran(kept, pooled, row_total, n_a, n_b):
        pooled.insert(0, kept.pop())
    if pooled and not kept:  # every category small: the largest stands against the rest
        kept.append(pooled.pop(0))
    rows_a = [counts_a.get(name, 0) for name in kept]
    rows_b = [counts_b.get(name, 0) for name in kept]
    if pooled:
        rows_a.append(sum(counts_a.get(name, 0) for name in pooled))
        rows_b.append(sum(counts_b.get(name, 0) for name in pooled))
    table = list(zip(rows_a, rows_b, strict=True))
    result = {"categories": tuple(kept), "pooled": tuple(pooled)}
    if len(table) == 2 and _smallest_expected(table) < MIN_EXPECTED:
        # The first row's counts as successes out of each side's total.
        p_value = fisher_exact_test(rows_a[0], n_a, rows_b[0], n_b)
        return CategoryChange(
            **result, counts_a=tuple(rows_a), counts_b=tuple(rows_b), statistic=None, dof=None,
            p_value=p_value, test="fisher",
        )  # fmt: skip
    statistic = chi_squared_statistic(table)
    dof = len(table) - 1
    return CategoryChange(
        **result, counts_a=tuple(rows_a), counts_b=tuple(rows_b), statistic=statistic, dof=dof,
        p_value=chi2_sf(statistic, dof), test="chi-squared",
    )  # fmt: skip


# --- quantiles of sketches -------------------------------------------------------------------


def bootstrap_quantile_distribution(sketch: Sketch, q: float) -> list[tuple[float, float]]:
    """[(value, probability)] of the q-quantile of a bootstrap resample of the sketch's values:
    exact, over the sketch's bins (the zero bin as 0.0), negligible probabilities dropped."""
    n = sketch.count
    if n == 0:
        return []
    rank = math.floor(q * (n - 1))  # the sketch's own quantile rank (records.contract.sketch)
    cells = ([(0.0, sketch.zero)] if sketch.zero else []) + [
        (representative(index), sketch.bins[index]) for index in sorted(sketch.bins)
    ]
    out = []
    seen, below = 0, 0.0  # below: P(the resample's quantile is under this cell)
    for value, count in cells:
        seen += count
        # The quantile is at or below this cell when at least rank + 1 of the n resampled
        # values are: a binomial count with success probability seen / n.
        at_or_below = 1.0 if seen == n else binomial_sf(rank + 1, n, seen / n)
        probability = at_or_below - below
        below = at_or_below
        if probability > _NEGLIGIBLE:
            out.append((value, probability))
    return out


def compare_quantiles(
    sketch_a: Sketch, sketch_b: Sketch, q: float, *, confidence: float = 0.95
) -> QuantileChange:
    """The difference of the q-quantiles (B − A), with its percentile bootstrap interval and a
    two-sided bootstrap p-value (twice the smaller tail of the bootstrap difference at 0)."""
    if not 0 <= q <= 1:
        raise ValueError(f"quantile {q} is outside [0, 1]")
    value_a, value_b = sketch_a.quantile(q), sketch_b.quantile(q)
    if value_a is None or value_b is None:
        return QuantileChange(q, value_a, value_b, None, None, 1.0)
    differences: dict[float, float] = {}
    # Side A's distribution once, not once per point of B's.
    distribution_a = bootstrap_quantile_distribution(sketch_a, q)
    for b, pb in bootstrap_quantile_distribution(sketch_b, q):
        for a, pa in distribution_a:
            mass = pa * pb
            if mass > _NEGLIGIBLE:
                differences[b - a] = differences.get(b - a, 0.0) + mass
    support = sorted(differences)
    total = sum(differences.values())
    tail = (1 - confidence) / 2
    low = high = support[-1]
    cumulative, low_found = 0.0, False
    for value in support:
        cumulative += differences[value] / total
        if not low_found and cumulative >= tail:
            low, low_found = value, True
        if cumulative >= 1 - tail:
            high = value
            break
    at_or_below_zero = sum(p for d, p in differences.items() if d <= 0) / total
    at_or_above_zero = sum(p for d, p in differences.items() if d >= 0) / total
    return QuantileChange(
        q=q,
        value_a=value_a,
        value_b=value_b,
        difference=value_b - value_a,
        interval=Interval(low, high),
        p_value=min(1.0, 2 * min(at_or_below_zero, at_or_above_zero)),
    )


# --- many measures ---------------------------------------------------------------------------


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """The Benjamini–Hochberg q-value of each p-value, in the order given: the smallest false
    discovery rate at which that measure would count as changed."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    q_values = [0.0] * m
    running = 1.0
    for position in range(m - 1, -1, -1):
        index = order[position]
        running = min(running, p_values[index] * m / (position + 1))
        q_values[index] = running
    return q_values

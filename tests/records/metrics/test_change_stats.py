"""The statistics of a comparison (records.metrics.change_stats, records.metrics.probability)
against scipy.stats and statsmodels, on generated counts; then as an operator relies on them: a
planted regression is found after Benjamini–Hochberg, and two samples of one agent are not
flagged more often than the false discovery rate allows."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from scipy.stats.contingency import expected_freq
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import (
    confint_proportions_2indep,
    proportion_confint,
    proportions_ztest,
    samplesize_proportions_2indep_onetail,
)

from records.contract.sketch import Sketch
from records.metrics import change_stats, probability
from records.metrics.change_stats import (
    benjamini_hochberg,
    bootstrap_quantile_distribution,
    compare_categories,
    compare_proportions,
    compare_quantiles,
)

EXACT = 1e-6  # the bar where the method is exact
SETTINGS = settings(max_examples=150, deadline=None, derandomize=True)


def close(got: float, want: float, tolerance: float = EXACT) -> bool:
    return math.isclose(got, float(want), rel_tol=tolerance, abs_tol=tolerance)


@st.composite
def two_sides(draw, max_trials: int = 5000):
    trials_a = draw(st.integers(1, max_trials))
    trials_b = draw(st.integers(1, max_trials))
    return (
        draw(st.integers(0, trials_a)),
        trials_a,
        draw(st.integers(0, trials_b)),
        trials_b,
    )


# --- the distributions' tails ------------------------------------------------------------------


@SETTINGS
@given(st.floats(-38, 38))
def test_the_normal_tail_is_scipys(z):
    assert math.isclose(probability.normal_sf(z), stats.norm.sf(z), rel_tol=1e-12, abs_tol=1e-300)


@SETTINGS
@given(st.floats(0, 400), st.integers(1, 60))
def test_the_chi_squared_tail_is_scipys(statistic, dof):
    got, want = probability.chi2_sf(statistic, dof), stats.chi2.sf(statistic, dof)
    assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-14), (got, want)


@SETTINGS
@given(st.integers(1, 200_000), st.floats(0, 1), st.floats(0, 1))
def test_the_binomial_tail_is_scipys(n, where, p):
    k = round(where * n)
    got, want = probability.binomial_sf(k, n, p), stats.binom.sf(k - 1, n, p)
    assert math.isclose(got, want, rel_tol=1e-8, abs_tol=1e-13), (k, n, p, got, want)


@SETTINGS
@given(st.integers(1, 400), st.data())
def test_the_hypergeometric_probabilities_are_scipys(total, data):
    marked = data.draw(st.integers(0, total))
    drawn = data.draw(st.integers(0, total))
    k = data.draw(st.integers(0, drawn))
    got = probability.hypergeometric_pmf(k, total, marked, drawn)
    assert math.isclose(got, stats.hypergeom.pmf(k, total, marked, drawn), rel_tol=1e-9)


# --- proportions -------------------------------------------------------------------------------


@SETTINGS
@given(st.integers(1, 100_000), st.data(), st.sampled_from([0.9, 0.95, 0.99]))
def test_the_wilson_interval_is_statsmodels(trials, data, confidence):
    successes = data.draw(st.integers(0, trials))
    got = change_stats.wilson_interval(successes, trials, confidence=confidence)
    low, high = proportion_confint(successes, trials, alpha=1 - confidence, method="wilson")
    assert close(got.low, low, 1e-9) and close(got.high, high, 1e-9)


@SETTINGS
@given(two_sides(), st.sampled_from([0.9, 0.95, 0.99]))
def test_the_newcombe_interval_of_the_difference_is_statsmodels(sides, confidence):
    a, n_a, b, n_b = sides
    got = change_stats.newcombe_interval(a, n_a, b, n_b, confidence=confidence)
    # statsmodels' difference is its first proportion minus its second: B first.
    low, high = confint_proportions_2indep(
        b, n_b, a, n_a, method="newcomb", compare="diff", alpha=1 - confidence
    )
    assert close(got.low, low, 1e-9) and close(got.high, high, 1e-9)


@SETTINGS
@given(two_sides())
def test_the_pooled_z_test_is_statsmodels(sides):
    a, n_a, b, n_b = sides
    got = change_stats.two_proportion_z_test(a, n_a, b, n_b)
    if a + b in (0, n_a + n_b):
        assert got == 1.0
        return
    _, want = proportions_ztest([b, a], [n_b, n_a])  # pooled variance by default
    assert close(got, want)


@SETTINGS
@given(two_sides(max_trials=300))
def test_fishers_exact_test_is_scipys(sides):
    a, n_a, b, n_b = sides
    got = change_stats.fisher_exact_test(a, n_a, b, n_b)
    assert close(got, stats.fisher_exact([[a, n_a - a], [b, n_b - b]]).pvalue)


@SETTINGS
@given(two_sides(max_trials=400))
def test_a_comparison_uses_fisher_exactly_when_a_cell_expects_fewer_than_5(sides):
    a, n_a, b, n_b = sides
    change = compare_proportions(a, n_a, b, n_b)
    table = np.array([[a, n_a - a], [b, n_b - b]])
    if a + b in (0, n_a + n_b):
        assert change.test == "z" and change.p_value == 1.0
        return
    small = expected_freq(table).min() < 5
    assert change.test == ("fisher" if small else "z")
    want = stats.fisher_exact(table).pvalue if small else proportions_ztest([b, a], [n_b, n_a])[1]
    assert close(change.p_value, want)
    assert change.difference == b / n_b - a / n_a
    assert change.difference_interval.low <= change.difference <= change.difference_interval.high


@SETTINGS
@given(
    st.floats(0.001, 0.999),
    st.floats(0.001, 0.999),
    st.sampled_from([0.01, 0.05, 0.1]),
    st.sampled_from([0.8, 0.9]),
)
def test_the_observations_needed_are_the_standard_formulas(rate_a, rate_b, alpha, power):
    needed = change_stats.sample_size_needed(rate_a, rate_b, alpha=alpha, power=power)
    if rate_a == rate_b:
        assert needed is None
        return
    want = samplesize_proportions_2indep_onetail(rate_b - rate_a, rate_a, power, alpha=alpha)
    assert needed == math.ceil(want) or math.isclose(needed, want, abs_tol=1e-6)


def test_it_says_how_many_more_runs_a_small_difference_needs():
    change = compare_proportions(4, 100, 6, 100)  # 4 % -> 6 %: not enough to tell
    assert change.p_value > 0.05
    needed = math.ceil(samplesize_proportions_2indep_onetail(0.02, 0.04, 0.8, alpha=0.05))
    assert change.needed_per_side == needed and change.more_needed == needed - 100
    assert compare_proportions(80, 2000, 160, 2000).more_needed == 0


def test_a_side_without_trials_is_no_comparison():
    change = compare_proportions(0, 0, 3, 10)
    assert (change.test, change.p_value, change.difference, change.more_needed) == (
        "none",
        1.0,
        None,
        None,
    )
    assert (change.interval_a.low, change.interval_a.high) == (0.0, 1.0)


# --- distributions over categories -------------------------------------------------------------

TOOLS = [f"tool-{i}" for i in range(8)]


@st.composite
def tool_counts(draw):
    def side():
        return {t: draw(st.integers(0, 400)) for t in draw(st.sets(st.sampled_from(TOOLS)))}

    return side(), side()


@SETTINGS
@given(tool_counts())
def test_the_homogeneity_test_is_scipys_on_the_table_it_tested(counts):
    counts_a, counts_b = counts
    change = compare_categories(counts_a, counts_b)
    if change.test == "none":
        assert change.p_value == 1.0
        assert (
            sum(counts_a.values()) == 0
            or sum(counts_b.values()) == 0
            or (len({t for t in TOOLS if counts_a.get(t, 0) + counts_b.get(t, 0)}) < 2)
        )
        return
    # Every category is counted once: tested on its own or pooled.
    assert sorted((*change.categories, *change.pooled)) == sorted(
        t for t in TOOLS if counts_a.get(t, 0) + counts_b.get(t, 0)
    )
    assert sum(change.counts_a) == sum(counts_a.values())
    table = np.array([change.counts_a, change.counts_b]).T
    if change.test == "fisher":
        assert table.shape == (2, 2) and expected_freq(table).min() < 5
        assert close(change.p_value, stats.fisher_exact(table).pvalue)
        return
    expected = expected_freq(table)
    assert expected.min() >= 1 and (expected < 5).sum() <= expected.size / 5  # Cochran's rule
    result = stats.chi2_contingency(table, correction=False)
    assert close(change.statistic, result.statistic) and change.dof == result.dof
    assert close(change.p_value, result.pvalue)


def test_it_pools_the_rare_categories_into_one_row():
    change = compare_categories(
        {"search": 500, "read": 300, "grep": 2, "write": 1},
        {"search": 480, "read": 330, "grep": 3, "write": 4},
    )
    assert change.categories == ("search", "read")
    assert change.pooled == ("grep", "write")
    assert (change.counts_a, change.counts_b) == ((500, 300, 3), (480, 330, 7))
    assert change.test == "chi-squared" and change.dof == 2


# --- quantiles of sketches ---------------------------------------------------------------------


def latency_sketch(rng: random.Random, n: int, median_ms: float) -> Sketch:
    sketch = Sketch()
    sketch.extend(rng.lognormvariate(math.log(median_ms), 0.5) for _ in range(n))
    return sketch


@pytest.mark.parametrize("q", [0.5, 0.95, 0.99])
def test_the_exact_bootstrap_of_a_quantile_matches_resampling(q):
    sketch = latency_sketch(random.Random(7), 3000, 800.0)
    exact = dict(bootstrap_quantile_distribution(sketch, q))
    assert math.isclose(sum(exact.values()), 1.0, abs_tol=1e-9)
    # Resample the sketch's values as a bootstrap would, many times, with numpy.
    values = np.array([0.0] * bool(sketch.zero) + [v for v, _ in _cells(sketch)])
    counts = np.array([sketch.zero] * bool(sketch.zero) + [c for _, c in _cells(sketch)])
    n, rank = sketch.count, math.floor(q * (sketch.count - 1))
    draws = np.random.default_rng(11).multinomial(n, counts / n, size=20_000)
    quantiles = values[np.argmax(np.cumsum(draws, axis=1) > rank, axis=1)]
    for value, share in zip(*np.unique(quantiles, return_counts=True), strict=True):
        assert abs(exact.get(float(value), 0.0) - share / 20_000) < 0.015, value


def _cells(sketch: Sketch) -> list[tuple[float, int]]:
    from records.contract.sketch import representative

    return [(representative(i), sketch.bins[i]) for i in sorted(sketch.bins)]


def test_a_slower_p95_is_found_and_the_same_latencies_are_not():
    rng = random.Random(3)
    before = latency_sketch(rng, 4000, 800.0)
    slower = compare_quantiles(before, latency_sketch(rng, 4000, 960.0), 0.95)
    assert slower.difference > 0 and slower.interval.low > 0 and slower.p_value < 0.01
    same = compare_quantiles(before, latency_sketch(rng, 4000, 800.0), 0.95)
    assert same.interval.low <= 0 <= same.interval.high and same.p_value > 0.05


@SETTINGS
@given(
    st.lists(st.floats(0, 1e5), min_size=1, max_size=300),
    st.lists(st.floats(0, 1e5), min_size=1, max_size=300),
    st.sampled_from([0.0, 0.5, 0.9, 0.95, 0.99, 1.0]),
)
def test_a_quantile_comparison_of_any_sketches_is_well_formed(values_a, values_b, q):
    sketch_a, sketch_b = Sketch(), Sketch()
    sketch_a.extend(values_a)
    sketch_b.extend(values_b)
    for sketch in (sketch_a, sketch_b):
        distribution = bootstrap_quantile_distribution(sketch, q)
        assert math.isclose(sum(p for _, p in distribution), 1.0, abs_tol=1e-9)
    change = compare_quantiles(sketch_a, sketch_b, q)
    assert change.difference == sketch_b.quantile(q) - sketch_a.quantile(q)
    assert change.interval.low <= change.interval.high
    assert 0.0 <= change.p_value <= 1.0
    if sorted(values_a) == sorted(values_b):  # one sample against itself: nothing moved
        assert change.difference == 0 and change.p_value == 1.0


def test_an_empty_sketch_is_no_comparison():
    change = compare_quantiles(Sketch(), latency_sketch(random.Random(1), 10, 5.0), 0.5)
    assert (change.difference, change.interval, change.p_value) == (None, None, 1.0)


# --- many measures -----------------------------------------------------------------------------


@SETTINGS
@given(st.lists(st.floats(0, 1), min_size=1, max_size=60))
def test_the_q_values_are_statsmodels_benjamini_hochberg(p_values):
    want = multipletests(p_values, method="fdr_bh")[1]
    assert all(close(g, w, 1e-12) for g, w in zip(benjamini_hochberg(p_values), want, strict=True))


def a_release(rng: random.Random, *, error_rate: float, p95_median: float, picks: int = 2000):
    """One side of a comparison: pick errors, the tools picked and the picks' latencies."""
    errors = sum(rng.random() < error_rate for _ in range(picks))
    weights = [0.4, 0.25, 0.15, 0.1, 0.06, 0.03, 0.01]
    tools: dict[str, int] = {}
    for tool in rng.choices(TOOLS[:7], weights=weights, k=picks):
        tools[tool] = tools.get(tool, 0) + 1
    return errors, tools, latency_sketch(rng, picks, p95_median)


def q_values(before, after, picks: int = 2000) -> dict[str, float]:
    measures = {
        "pick_error_rate": compare_proportions(before[0], picks, after[0], picks).p_value,
        "tool_shares": compare_categories(before[1], after[1]).p_value,
        "latency_p50": compare_quantiles(before[2], after[2], 0.5).p_value,
        "latency_p95": compare_quantiles(before[2], after[2], 0.95).p_value,
    }
    return dict(zip(measures, benjamini_hochberg(list(measures.values())), strict=True))


def test_a_planted_regression_is_significant_after_benjamini_hochberg():
    rng = random.Random(2026)
    before = a_release(rng, error_rate=0.04, p95_median=800.0)
    after = a_release(rng, error_rate=0.08, p95_median=800.0)
    found = q_values(before, after)
    assert found["pick_error_rate"] < 0.05, found


def test_two_samples_of_one_release_are_rarely_flagged():
    flagged = 0
    for seed in range(200):
        rng = random.Random(seed)
        before = a_release(rng, error_rate=0.04, p95_median=800.0)
        after = a_release(rng, error_rate=0.04, p95_median=800.0)
        flagged += min(q_values(before, after).values()) < 0.05
    assert flagged < 10  # fewer than 5 % of the seeds

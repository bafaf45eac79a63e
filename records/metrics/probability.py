"""The tails of the distributions a comparison's tests read, in the standard library only.

scipy is not a runtime dependency of the product, so the few functions the comparisons need
(records.metrics.change_stats) are here: the normal tail (math.erfc, exact to the last bits far
into the tail), the chi-squared tail (the regularized upper incomplete gamma function), the
binomial tail (the regularized incomplete beta function) and the hypergeometric probabilities
of Fisher's exact test (log-factorials from math.lgamma). The series and continued fractions
are the classic ones (Numerical Recipes, 3rd ed., 6.2 and 6.4), evaluated with the modified
Lentz method to a relative error of about 1e-15. tests/records/metrics/test_change_stats.py
checks each against scipy.stats.
"""

from __future__ import annotations

import math
from statistics import NormalDist

_EPSILON = 1e-15
_TINY = 1e-300
_MAX_ITERATIONS = 100_000
_STANDARD_NORMAL = NormalDist()


def normal_sf(z: float) -> float:
    """P(Z > z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2))


def normal_quantile(p: float) -> float:
    """The z with P(Z <= z) = p."""
    return _STANDARD_NORMAL.inv_cdf(p)


def regularized_gamma_q(a: float, x: float) -> float:
    """Q(a, x) = Γ(a, x) / Γ(a), the upper tail of a gamma distribution of shape a."""
    if a <= 0:
        raise ValueError("a must be positive")
    if x <= 0:
        return 1.0
    if x < a + 1:
        return 1.0 - _gamma_series(a, x)
    return _gamma_continued_fraction(a, x)


def _gamma_series(a: float, x: float) -> float:
    """P(a, x) by its series, which converges fast for x < a + 1."""
    term = total = 1.0 / a
    denominator = a
    for _ in range(_MAX_ITERATIONS):
        denominator += 1
        term *= x / denominator
        total += term
        if abs(term) < abs(total) * _EPSILON:
            break
    return total * math.exp(-x + a * math.log(x) - math.lgamma(a))


def _gamma_continued_fraction(a: float, x: float) -> float:
    """Q(a, x) by its continued fraction, which converges fast for x >= a + 1."""
    b = x + 1 - a
    c = 1 / _TINY
    d = 1 / b
    h = d
    for i in range(1, _MAX_ITERATIONS):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = _TINY if abs(d) < _TINY else d
        c = b + an / c
        c = _TINY if abs(c) < _TINY else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < _EPSILON:
            break
    return math.exp(-x + a * math.log(x) - math.lgamma(a)) * h


def chi2_sf(statistic: float, dof: int) -> float:
    """P(X > statistic) for X chi-squared with `dof` degrees of freedom."""
    if dof < 1:
        raise ValueError("a chi-squared distribution has at least one degree of freedom")
    return regularized_gamma_q(dof / 2, statistic / 2)


def regularized_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b), the lower tail of a beta distribution with shapes a and b."""
    if a <= 0 or b <= 0:
        raise ValueError("a and b must be positive")
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    # The continued fraction converges fast on the side of the mean it is evaluated on.
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _beta_continued_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(1 - x, b, a) / b


def _beta_continued_fraction(x: float, a: float, b: float) -> float:
    qab, qap, qam = a + b, a + 1, a - 1
    c = 1.0
    d = 1 - qab * x / qap
    d = _TINY if abs(d) < _TINY else d
    d = 1 / d
    h = d
    for m in range(1, _MAX_ITERATIONS):
        m2 = 2 * m
        for numerator in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1 + numerator * d
            d = _TINY if abs(d) < _TINY else d
            c = 1 + numerator / c
            c = _TINY if abs(c) < _TINY else c
            d = 1 / d
            delta = d * c
            h *= delta
        if abs(delta - 1) < _EPSILON:
            break
    return h


def binomial_sf(k: int, n: int, p: float) -> float:
    """P(X >= k) for X binomial with n trials of success probability p."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if p <= 0:
        return 0.0
    if p >= 1:
        return 1.0
    return regularized_beta(p, k, n - k + 1)


def log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def hypergeometric_pmf(k: int, total: int, marked: int, drawn: int) -> float:
    """P(X = k): k marked items among `drawn` taken without replacement from `total` items of
    which `marked` are marked."""
    if k < max(0, drawn - (total - marked)) or k > min(drawn, marked):
        return 0.0
    return math.exp(
        log_comb(marked, k) + log_comb(total - marked, drawn - k) - log_comb(total, drawn)
    )

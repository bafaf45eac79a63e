"""How a rule's values read to an operator: rates in per cent, latencies in ms, counts as counts.

Rules, states and events store a rate as a fraction (0.1), as the metrics API answers it; every
page, form, preview and notification shows it as a percentage (10 %), and the rule form reads a
rate threshold typed in per cent. These functions are the one place that converts.
"""

from __future__ import annotations

from alerts.windows import RULE_METRICS, Family

UNITS = {
    Family.RATE: "%",
    Family.LATENCY: "ms",
    Family.COUNT: "records",
    Family.STREAK: "in a row",
    # A release regression rule's value is the measure's q-value (alerts.release_watch).
    Family.REGRESSION: "q",
}
# Counts that are not records: the spend metrics add up USD (records.metrics.cost_metrics).
USD = "USD"
METRIC_UNITS = {"cost": USD, "cost_per_run": USD}


def family(metric: str) -> Family | None:
    return RULE_METRICS.get(metric)


def is_rate(metric: str) -> bool:
    return family(metric) == Family.RATE


def unit(metric: str) -> str:
    return METRIC_UNITS.get(metric) or UNITS.get(family(metric), "")


def to_form(metric: str, value: float | None) -> float | None:
    """A stored value as the form shows it: a rate 0.1 → 10."""
    if value is None or not is_rate(metric):
        return value
    return round(value * 100, 9)  # 0.1 * 100 is 10.000000000000002


def from_form(metric: str, value: float | None) -> float | None:
    """A typed value as stored: a rate of 10 (per cent) → 0.1."""
    if value is None or not is_rate(metric):
        return value
    return value / 100


def display(metric: str, value: float | None) -> str:
    """A value with its unit: "12.5 %", "850 ms", "1,204 records", "3 in a row"."""
    if value is None:
        return "no data"
    fam = family(metric)
    if unit(metric) == USD:
        return f"{value:,.2f} USD" if abs(value) >= 0.01 or not value else f"{value:.4g} USD"
    if fam == Family.RATE:
        return f"{value * 100:.4g} %" if value * 100 < 0.1 and value else f"{value * 100:.1f} %"
    if fam == Family.LATENCY:
        return f"{value:,.0f} ms"
    if fam == Family.COUNT:
        return f"{value:,.0f}"
    if fam == Family.STREAK:
        return f"{value:,.0f} in a row"
    if fam == Family.REGRESSION:
        return f"q = {value:.2g}"
    return f"{value:g}"


def threshold(metric: str, value: float | None) -> str:
    """A threshold as typed in the form, with its unit: "10 %", "800 ms", "5 in a row"."""
    if value is None:
        return ""
    shown = to_form(metric, value)
    suffix = unit(metric)
    if family(metric) == Family.REGRESSION:
        return f"q {shown:g}"
    return f"{shown:g} {suffix}" if suffix and suffix != "records" else f"{shown:g}"

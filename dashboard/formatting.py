"""How numbers read on the pages: pure functions, wrapped as template filters
(dashboard.templatetags) and called by the reads that build rows (dashboard.queries).

Outside web/ and queries/ so that both may import it: it depends on nothing of the dashboard."""

from __future__ import annotations

import math

from records.contract import rollup_keys
from records.contract.cost import GENAI_PRICES, NANO_PER_USD, OVERRIDE, REPORTED, describe


def duration_ms(value: float | None) -> str:
    """940 → "940 ms"; 9401 → "9.4 s"; 116300 → "116.3 s"; None → "—".

    Seconds from one second up, so that durations side by side read in one unit.
    """
    if value is None:
        return "—"
    if abs(value) >= 1000:
        return f"{value / 1000:,.1f} s"
    return f"{value:,.0f} ms"


def count(value: int | float | None) -> str:
    """3700 → "3,700"; None → "—"."""
    if value is None or value == "":
        return "—"
    return f"{value:,.0f}"


def percent(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "—"
    return f"{value * 100:.{digits}f} %"


def offset(ms: float) -> str:
    """Milliseconds since the run's first record as +m:ss.mmm (or +h:mm:ss.mmm)."""
    seconds, milli = divmod(int(round(ms)), 1000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"+{hours}:{minutes:02d}:{seconds:02d}.{milli:03d}"
    return f"+{minutes}:{seconds:02d}.{milli:03d}"


def kpi_value(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "rate":
        return percent(value)
    if unit == "ms":
        return duration_ms(value)
    if unit == "usd":  # nano-USD
        return usd(round(value))
    return f"{value:,.0f}"


def change(value: float | None, unit: str) -> str:
    """A KPI's change against the previous period: points for rates, per cent otherwise."""
    if value is None:
        return "no previous data"
    if unit == "rate":
        return f"{value * 100:+.1f} pts"
    return f"{value * 100:+.0f} %"


def change_tone(value: float | None, rise_is_bad: bool) -> str:
    """CSS class of a change: good, bad or flat (under half a point or half a per cent)."""
    if value is None or abs(value) < 0.005:
        return "flat"
    return "bad" if (value > 0) == rise_is_bad else "good"


def tokens(tokens_in: int | None, tokens_out: int | None) -> str:
    """Token usage as reported: "3,700 in / 120 out"; a side not reported says so, never 0."""
    if tokens_in is None and tokens_out is None:
        return "not reported"

    def side(value: int | None) -> str:
        return "not reported" if value is None else f"{value:,}"

    return f"{side(tokens_in)} in / {side(tokens_out)} out"


def model_label(model: str | None) -> str:
    """A metric's model as pages show it; a record that named none reads "(model not
    reported)" everywhere (records.contract.rollup_keys.NO_MODEL_LABEL)."""
    return rollup_keys.model_label(model)


def usd(nano: int | None) -> str:
    """nano-USD as an amount: 12_345_678_900 → "$12.35"; 12_345_678 → "$0.0123"; under a cent
    two significant digits (12_345 → "$0.000012"), so that a cheap call never reads "$0.0000".
    None → "—"."""
    if nano is None:
        return "—"
    value = nano / NANO_PER_USD
    size = abs(value)
    if size == 0:
        return "$0.00"
    if size >= 1:
        return f"${value:,.2f}"
    if size >= 0.01:
        return f"${value:,.4f}"
    return f"${value:.{1 - math.floor(math.log10(size))}f}"


def unpriced_cost(nano: int, unpriced: int) -> str:
    """A sum of costs and the records with usage it leaves out for want of a price:
    "$0.0123 + 2 unpriced"; nothing priced and nothing unpriced is "—"."""
    if not unpriced:
        return usd(nano) if nano else "—"
    if not nano:
        return f"{unpriced:,} unpriced"
    return f"{usd(nano)} + {unpriced:,} unpriced"


def unknown_share(unknown: int, with_usage: int) -> str:
    """The share of records with usage that have no known price, as a sentence's end."""
    if not with_usage:
        return "no record with usage in this period"
    return f"{percent(unknown / with_usage)} of records with usage have no known price"


_SOURCE_LABELS = {
    REPORTED: "reported by the agent",
    GENAI_PRICES: "genai-prices",
    OVERRIDE: "project price",
}


def record_cost(nano: int | None, source: str | None, model: str | None) -> str:
    """One record's cost and where it came from: "$0.0096 (genai-prices)", "$0.0123 (reported
    by the agent)", "unknown price: no price known for model 'x'"; "" without usage."""
    cost = describe(nano, source, model)
    if cost is None:
        return ""
    if cost["usd"] is None:
        return f"unknown price: {cost.get('reason', 'not known')}"
    return f"{usd(nano)} ({_SOURCE_LABELS.get(source or '', source)})"


def measure_value(value: float | None, method: str) -> str:
    """A compared measure's value: a rate or share as per cent, a latency in ms, a mean as is."""
    if value is None:
        return "—"
    if method in ("proportion", "categories"):
        return percent(value, 2)
    if method == "quantile":
        return duration_ms(value)
    return f"{value:,.4g}"


def measure_change(change: float | None, interval, method: str) -> str:
    """B − A, signed, with its interval when it has one: "+4.00 pp (+2.71 to +5.29)"."""
    if change is None:
        return "—"
    if method in ("proportion", "categories"):
        text = f"{change * 100:+.2f} pp"
        if interval:
            text += f" ({interval[0] * 100:+.2f} to {interval[1] * 100:+.2f})"
        return text
    if method == "quantile":
        text = f"{change:+,.1f} ms"
        return text + (f" ({interval[0]:+,.1f} to {interval[1]:+,.1f})" if interval else "")
    return f"{change:+,.4g}"


def p_value(value: float | None) -> str:
    """0.0000123 → "1.2e-05"; 0.034 → "0.034"; None → "—" (no test)."""
    if value is None:
        return "—"
    return f"{value:.2g}" if value < 0.001 else f"{value:.3f}"

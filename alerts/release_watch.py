"""Release regression rules: each agent's newest release against the release before it.

A rule of metric `release_regression` reads no window. At each tick it takes, for its agent (or
every agent of the project), the two newest releases by their markers' times (a deploy marker,
or the first record of the release: records.models.ReleaseMarker). Once the newest release has
at least the rule's `min_records` runs, the two are compared
(records.metrics.release_comparison.compare_sides), and each measure that got worse with a
Benjamini–Hochberg q-value at or under the rule's threshold is a group of its own, valued by
that q-value. The state machine (alerts.evaluate) then treats the groups as any grouped rule's:
a group fires once, and resolves when a newer release no longer shows the regression. What the
notification says of each group (both values, the change and its interval, the link to the
comparison) is its `detail`, written with the event.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlencode

from django.conf import settings
from django.urls import NoReverseMatch, reverse

from alerts.evaluate import Sample
from records.metrics import release_comparison
from records.metrics.release_comparison import MeasureChange
from records.models import ReleaseMarker

# A group names the agent, the release and the measure; AlertState.group holds 200 characters.
MAX_GROUP_CHARS = 200
# The runs of a release: the comparison's cost-per-run measure counts them.
RUNS_MEASURE = "cost_per_run"


@dataclass(frozen=True)
class ReleasePair:
    agent: str
    previous: str
    newest: str


def newest_pairs(project_id: int, agent: str) -> list[ReleasePair]:
    """For `agent` ("" for every agent), each agent's newest release and the one before it, by
    their markers' times (ties by name). An agent with one release has no pair."""
    markers = ReleaseMarker.objects.filter(project_id=project_id)
    if agent:
        markers = markers.filter(agent=agent)
    newest: dict[str, list[str]] = {}
    for marker_agent, name in markers.order_by("agent", "-time", "-name").values_list(
        "agent", "name"
    ):
        names = newest.setdefault(marker_agent, [])
        if len(names) < 2:
            names.append(name)
    return [
        ReleasePair(marker_agent, names[1], names[0])
        for marker_agent, names in sorted(newest.items())
        if len(names) == 2
    ]


def regression_samples(
    project_id: int, agent: str, threshold: float, min_runs: int, now: datetime
) -> tuple[dict[str, Sample], dict[str, dict]]:
    """The groups that regressed (their q-values and the newest release's observations), and
    each group's detail for its notification."""
    samples: dict[str, Sample] = {}
    details: dict[str, dict] = {}
    for pair in newest_pairs(project_id, agent):
        a, b = release_comparison.parse_sides(
            project_id, pair.agent, f"release:{pair.previous}", f"release:{pair.newest}", now=now
        )
        comparison = release_comparison.compare_sides(project_id, pair.agent, a, b)
        runs = next((m.n_b for m in comparison.measures if m.measure == RUNS_MEASURE), 0)
        if runs < min_runs:
            continue
        for measure in comparison.measures:
            if not _regressed(measure, threshold):
                continue
            group = _group(pair, measure)
            samples[group] = Sample(measure.q_value, measure.n_b)
            details[group] = detail(pair, measure)
    return samples, details


def _regressed(measure: MeasureChange, threshold: float) -> bool:
    """Worse, and significant at the rule's false discovery rate. The comparison's own verdict
    uses its fixed alpha; a rule may ask for a stricter or a looser one. A shift in the tools
    picked (a distribution over categories) is a change, not a regression: it has no worse
    direction, and the comparison page shows it."""
    if measure.method == "categories":
        return False
    if measure.q_value is None or not measure.change or measure.q_value > threshold:
        return False
    worse = measure.change > 0 if measure.worse == "higher" else measure.change < 0
    return worse


def _group(pair: ReleasePair, measure: MeasureChange) -> str:
    split = ", ".join(f"{k} {v}" for k, v in measure.group.items())
    label = f"{measure.label} ({split})" if split else measure.label
    who = f"{pair.agent} " if pair.agent else ""
    text = f"{who}{pair.newest}: {label}"
    return text if len(text) <= MAX_GROUP_CHARS else text[: MAX_GROUP_CHARS - 1] + "…"


def detail(pair: ReleasePair, measure: MeasureChange) -> dict:
    """What a notification says of one regressed measure."""
    return {
        "agent": pair.agent,
        "release": pair.newest,
        "previous_release": pair.previous,
        "measure": measure.measure,
        "label": measure.label,
        "split": dict(measure.group),
        "method": measure.method,
        "unit": measure.unit,
        "value_before": measure.value_a,
        "value_after": measure.value_b,
        "observations_before": measure.n_a,
        "observations_after": measure.n_b,
        "change": measure.change,
        "interval": list(measure.interval) if measure.interval else None,
        "p_value": measure.p_value,
        "q_value": measure.q_value,
        "test": measure.test,
        "url": comparison_url(pair),
    }


def comparison_url(pair: ReleasePair) -> str:
    """The comparison page of the pair, absolute (a notification is read outside the site)."""
    query = urlencode(
        {"agent": pair.agent, "a": f"release:{pair.previous}", "b": f"release:{pair.newest}"}
    )
    try:
        path = reverse("dash-changes")
    except NoReverseMatch:  # pages not mounted (an API-only deployment)
        path = "/changes/"
    return f"{settings.SITE_URL.rstrip('/')}{path}?{query}"


def detail_lines(detail: dict) -> list[str]:
    """A regressed measure in the words of a notification: the measure, both values, the change
    with its interval and q-value, the observations and the comparison's link."""
    proportion = detail.get("method") == "proportion"

    def value(v: float | None) -> str:
        if v is None:
            return "no value"
        return f"{v * 100:.2f} %" if proportion else f"{v:,.4g}"

    def change(v: float) -> str:
        return f"{v * 100:+.2f} points" if proportion else f"{v:+,.4g}"

    split = ", ".join(f"{k} {v}" for k, v in (detail.get("split") or {}).items())
    label = detail.get("label", detail.get("measure", ""))
    lines = [
        f"Measure: {label}{f' ({split})' if split else ''}",
        f"Before: {value(detail.get('value_before'))} in release {detail.get('previous_release')}"
        f" ({detail.get('observations_before', 0):,} {detail.get('unit', '')})",
        f"After: {value(detail.get('value_after'))} in release {detail.get('release')}"
        f" ({detail.get('observations_after', 0):,} {detail.get('unit', '')})",
    ]
    if detail.get("change") is not None:
        interval = detail.get("interval")
        words = f"Change: {change(detail['change'])}"
        if interval:
            words += f", 95 % interval {change(interval[0])} to {change(interval[1])}"
        if detail.get("q_value") is not None:
            words += f"; q = {detail['q_value']:.2g} ({detail.get('test', '')})"
        lines.append(words)
    lines.append(f"Compare: {detail.get('url', '')}")
    return lines

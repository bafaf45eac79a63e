"""Reading /metrics as Prometheus would: parsed by prometheus-client's own parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

TOKEN = "a-scrape-token-for-the-tests"
Samples = dict[tuple[str, frozenset], float]


def parse(text: str) -> Samples:
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value; 0 for a series not exported yet (a counter that never moved)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def families(text: str) -> set[str]:
    return {family.name for family in text_string_to_metric_families(text)}

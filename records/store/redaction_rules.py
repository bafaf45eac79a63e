"""The redaction rules a project's ingest applies, read for the one write path
(api.record_writes) as plain data."""

from __future__ import annotations

from records.contract.redaction import Rules
from records.models import RedactionPolicy, RedactionRule
from records.redaction_syntax import DEFAULTS


def project_rules(project_id: int) -> Rules:
    """The rules a project's ingest applies, as plain data (two small reads)."""
    policy = RedactionPolicy.objects.filter(project_id=project_id).first()
    detectors = policy.detectors() if policy is not None else DEFAULTS
    patterns: list[tuple[str, str]] = []
    keys: list[str] = []
    for kind, name, value in RedactionRule.objects.filter(project_id=project_id).values_list(
        "kind", "name", "value"
    ):
        if kind == RedactionRule.Kind.JSON_KEY:
            keys.append(value.strip())
        else:
            patterns.append((name, value))
    return Rules(tuple(detectors), tuple(sorted(patterns)), tuple(sorted(keys)))

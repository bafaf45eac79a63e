"""The redaction rules a project's ingest applies, read for the one write path
(api.record_writes) as plain data."""

from __future__ import annotations

from django.db import connection, models

from records.contract.redaction import Rules
from records.models import RedactionPolicy, RedactionRule
from records.redaction_syntax import DEFAULTS

# The policy's switches, read off the model so that a detector added to it is read here too.
_POLICY_FLAGS = tuple(
    f.name for f in RedactionPolicy._meta.concrete_fields if isinstance(f, models.BooleanField)
)
_RULE_COLUMNS = 1 + len(_POLICY_FLAGS)  # where a rule's kind, name and value start in a row
# The policy row (if any) and the project's own rules in one round trip: every batch reads
# them, and a change must reach the next batch of every web process.
_RULES_QUERY = f"""
SELECT 'policy', {", ".join(_POLICY_FLAGS)}, NULL, NULL, NULL
FROM {RedactionPolicy._meta.db_table} WHERE project_id = %s
UNION ALL
SELECT 'rule', {", ".join(["NULL"] * len(_POLICY_FLAGS))}, kind, name, value
FROM {RedactionRule._meta.db_table} WHERE project_id = %s
"""


def project_rules(project_id: int) -> Rules:
    """The rules a project's ingest applies, as plain data (one small read)."""
    with connection.cursor() as cursor:
        cursor.execute(_RULES_QUERY, [project_id, project_id])
        rows = cursor.fetchall()
    detectors = DEFAULTS
    patterns: list[tuple[str, str]] = []
    keys: list[str] = []
    for row in rows:
        if row[0] == "policy":
            flags = dict(zip(_POLICY_FLAGS, map(bool, row[1:_RULE_COLUMNS]), strict=True))
            detectors = RedactionPolicy(**flags).detectors()
            continue
        kind, name, value = row[_RULE_COLUMNS:]
        if kind == RedactionRule.Kind.JSON_KEY:
            keys.append(value.strip())
        else:
            patterns.append((name, value))
    return Rules(tuple(detectors), tuple(sorted(patterns)), tuple(sorted(keys)))

"""The read path of the audit log (records.models.AuditEntry): a project's entries newest first,
filtered by action, object type and person, for the page, the API and the export.

Entries are written by records.store.audit_trail alone. Every read here is by the
(project, id descending) index: a page is `id < the last id seen`, never an OFFSET.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from records.contract.filters import FilterError
from records.models import AuditEntry, Project
from records.store.audit_trail import OBJECT_TYPES

__all__ = [
    "AUDIT_FILTERS",
    "OBJECT_TYPES",
    "AuditFilters",
    "actors_of",
    "audit_entries",
    "entries_before",
    "export_entries",
    "parse_audit_filters",
]

# The filter parameters, as the page, the API and the export take them.
AUDIT_FILTERS = ("action", "object_type", "actor")
EXPORT_PAGE = 1000


@dataclass(frozen=True)
class AuditFilters:
    action: str = ""
    object_type: str = ""
    actor: str = ""


def parse_audit_filters(params: Mapping[str, str]) -> AuditFilters:
    """The filters of a query string; one too long to be a name is a FilterError (a 400)."""
    values = {}
    for name in AUDIT_FILTERS:
        value = (params.get(name) or "").strip()
        if len(value) > 200 or "\x00" in value:
            raise FilterError(name, "is not a name of the audit log")
        values[name] = value
    return AuditFilters(**values)


def audit_entries(project: Project, filters: AuditFilters = AuditFilters()) -> QuerySet:
    """The project's entries, newest first. `actor` is the person: an operator's user name or
    a key's label, as the entry names them."""
    entries = AuditEntry.objects.filter(project=project)
    if filters.action:
        entries = entries.filter(action=filters.action)
    if filters.object_type:
        entries = entries.filter(object_type=filters.object_type)
    if filters.actor:
        entries = entries.filter(actor_name=filters.actor)
    return entries.order_by("-id")


def entries_before(entries: QuerySet, before_id: int | None, size: int) -> tuple[list, int | None]:
    """One page of `entries` (newest first) below `before_id`, and the id the next page starts
    below (None on the last page)."""
    if before_id is not None:
        entries = entries.filter(id__lt=before_id)
    rows = list(entries.order_by("-id")[: size + 1])
    if len(rows) <= size:
        return rows, None
    return rows[:size], rows[size - 1].pk


def actors_of(project: Project) -> list[str]:
    """The people who have changed something in the project, for the page's person filter."""
    names = AuditEntry.objects.filter(project=project).values_list("actor_name", flat=True)
    return sorted(set(names.distinct()))


def export_entries(entries: QuerySet, *, page: int = EXPORT_PAGE) -> Iterator[dict[str, Any]]:
    """Every entry of `entries`, newest first, as dicts of AuditEntry.SHOWN (what
    records.formats.audit_export writes), read in keyset pages of `page` rows, each its own
    query: memory stays flat and no transaction stays open."""
    before: int | None = None
    while True:
        rows = entries.order_by("-id")
        if before is not None:
            rows = rows.filter(id__lt=before)
        batch = list(rows.values(*AuditEntry.SHOWN)[:page])
        yield from batch
        if len(batch) < page:
            return
        before = batch[-1]["id"]

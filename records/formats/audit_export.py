"""The audit log as CSV and JSON Lines, framed as the records' exports are
(records.formats.record_export: its formats' content types, its CSV cells neutralised against
spreadsheet formulas, its batches of lines).

The rows are dicts of AuditEntry.SHOWN, newest first:
- JSONL: one entry a line, `before` and `after` as JSON objects (null when absent);
- CSV: one column a field, `before` and `after` as JSON text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson

from records.formats.record_export import FORMATS, batched, csv_text, csv_timestamp
from records.models import AuditEntry

AUDIT_FORMATS = ("csv", "jsonl")

Entry = dict[str, Any]


def audit_jsonl_chunks(rows: Iterable[Entry], *, batch: int = 1000) -> Iterator[bytes]:
    for chunk in batched(rows, batch):
        lines = [
            orjson.dumps({name: row[name] for name in AuditEntry.SHOWN}, option=orjson.OPT_UTC_Z)
            for row in chunk
        ]
        lines.append(b"")
        yield b"\n".join(lines)


def _json_cell(value: Any) -> str:
    return "" if value is None else csv_text(orjson.dumps(value).decode())


def audit_csv_line(row: Entry) -> str:
    return ",".join(
        (
            str(row["id"]),
            csv_timestamp(row["at"]),
            row["actor_kind"],  # a fixed vocabulary (AuditEntry.ActorKind)
            csv_text(row["actor_name"]),
            csv_text(row["action"]),
            csv_text(row["object_type"]),
            csv_text(row["object_id"]),
            csv_text(row["object_name"]),
            _json_cell(row["before"]),
            _json_cell(row["after"]),
            row["address"] or "",
        )
    )


def audit_csv_chunks(rows: Iterable[Entry], *, batch: int = 1000) -> Iterator[bytes]:
    yield (",".join(AuditEntry.SHOWN) + "\r\n").encode()
    for chunk in batched(rows, batch):
        lines = [audit_csv_line(r) for r in chunk]
        lines.append("")
        yield "\r\n".join(lines).encode()


AUDIT_WRITERS: dict[str, Callable[[Iterable[Entry]], Iterator[bytes]]] = {
    "csv": audit_csv_chunks,
    "jsonl": audit_jsonl_chunks,
}


def audit_export_chunks(fmt: str, rows: Iterable[Entry]) -> Iterator[bytes]:
    """The audit export file, as byte chunks, of `rows` (audit_reads.export_entries)."""
    return AUDIT_WRITERS[fmt](rows)


def content_type(fmt: str) -> str:
    return FORMATS[fmt].content_type

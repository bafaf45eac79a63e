"""Exports of filtered records as CSV, JSONL and Parquet (docs/api.md, "Exports"), as plain
functions.

`export_rows()` reads records from a server-side cursor (PostgreSQL: a named cursor, fetched
`chunk_size` rows at a time) in (ts, id) order, with `data` and `derived` as JSON text so that
nothing decodes and re-encodes them; the writers turn those rows into byte chunks, a batch of rows
at a time, so memory stays flat however many rows there are. The API streams the chunks
(api.export_endpoints); a worker job reads keyset pages instead (`export_rows_paged`) and writes
them to a file (workers.export_jobs).

- JSONL: one record a line, as the read API shows it: the envelope as posted, `data`, `derived`
  (with `derived.cost` of a record with usage, records.contract.cost.describe).
- CSV: one column per envelope and facet field, `cost_usd` and `cost_source` (both empty for a
  record without usage; `cost_source` "unknown" and `cost_usd` empty when its price is not known),
  plus `data` and `derived` as JSON. A cell that a
  spreadsheet would run as a formula (first character = + - @, tab or CR) gets a leading `'`.
- Parquet: the same columns, typed (timestamps, integers, floats, booleans), one row group per
  `row_group` rows.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from django.db.models import Func, Q, QuerySet, TextField
from django.db.models.functions import Cast

from records.contract.cost import NANO_PER_USD, describe
from records.contract.filters import FilterError

ENVELOPE_COLUMNS = (
    "id",
    "kind",
    "run_id",
    "ts",
    "session_id",
    "agent",
    "parent_run_id",
    "release",
)
FACET_COLUMNS = (
    "model",
    "iteration",
    "latency_ms",
    "skip_reason",
    "outcome",
    "is_swap",
    "is_fallback",
    "is_error",
    "is_contract_break",
    "tokens_in",
    "tokens_out",
)
COST_COLUMNS = ("cost_usd", "cost_source")
COLUMNS = (*ENVELOPE_COLUMNS, *FACET_COLUMNS, *COST_COLUMNS, "data", "derived")
# The Record fields behind COLUMNS, in the same order (`id` is the record_key: the posted id).
# `ts` is read as text and parsed here (UtcText): Django's timestamptz loader for psycopg is pure
# Python and cost more than everything else per row; datetime.fromisoformat is C.
_FIELDS = (
    "record_key",
    "kind",
    "run_id",
    "ts_text",
    *ENVELOPE_COLUMNS[4:],
    *FACET_COLUMNS,
    # Read as stored (nano-USD) and written as USD by each writer.
    "cost_nano",
    "cost_source",
    "data_text",
    "derived_text",
)
_TS = COLUMNS.index("ts")
_DATA, _DERIVED = COLUMNS.index("data"), COLUMNS.index("derived")
_COST, _SOURCE, _MODEL = (
    COLUMNS.index("cost_usd"),
    COLUMNS.index("cost_source"),
    COLUMNS.index("model"),
)

# A CSV cell starting with one of these is a formula to a spreadsheet (CSV injection).
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
_TRIGGER_SET = frozenset(FORMULA_TRIGGERS)


@dataclass(frozen=True)
class ExportFormat:
    name: str
    content_type: str
    extension: str


FORMATS: dict[str, ExportFormat] = {
    f.name: f
    for f in (
        ExportFormat("csv", "text/csv; charset=utf-8", "csv"),
        ExportFormat("jsonl", "application/x-ndjson", "jsonl"),
        ExportFormat("parquet", "application/vnd.apache.parquet", "parquet"),
    )
}

Row = tuple[Any, ...]


def parse_format(value: str | None, offered: Iterable[str] = FORMATS) -> str:
    """The `format` parameter of an export (one of `offered`), or FilterError naming it."""
    offered = list(offered)
    if not value:
        raise FilterError("format", f"is required: one of {', '.join(offered)}")
    if value not in offered:
        raise FilterError(
            "format", f"{value!r} is not an export format; one of: {', '.join(offered)}"
        )
    return value


class UtcText(Func):
    """A timestamp as ISO 8601 text in UTC, whatever the connection's TimeZone and DateStyle."""

    output_field = TextField()
    template = "CAST(%(expressions)s AS text)"  # SQLite keeps timestamps as UTC text already

    def as_postgresql(self, compiler, connection, **extra):
        return self.as_sql(
            compiler,
            connection,
            template="to_char(%(expressions)s AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US')",
            **extra,
        )


def export_values(queryset: QuerySet) -> QuerySet:
    """The export's query: COLUMNS as a values_list, oldest first (ties broken by id).

    Exposed for bench/export.py, which COPYs the same query as the ceiling to compare with.
    """
    text = TextField()
    return (
        queryset.order_by("ts", "id")
        .annotate(
            ts_text=UtcText("ts"),
            data_text=Cast("data", text),
            derived_text=Cast("derived", text),
        )
        .values_list(*_FIELDS)
    )


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def _typed(rows: Iterable[Row]) -> Iterator[Row]:
    for r in rows:
        yield (r[0], r[1], r[2], _utc(r[3]), *r[4:])


def export_rows(queryset: QuerySet, *, chunk_size: int = 2000) -> Iterator[Row]:
    """The rows of a (filtered) Record queryset in COLUMNS order, oldest first.

    On PostgreSQL `iterator()` is a named cursor; callers stream inside a transaction so that
    it is not declared WITH HOLD (which would make PostgreSQL materialise every row first).
    """
    return _typed(export_values(queryset).iterator(chunk_size=chunk_size))


def export_rows_paged(queryset: QuerySet, *, page: int = 5000) -> Iterator[Row]:
    """The same rows as export_rows(), read as keyset pages of `page` rows, each its own query.

    For worker jobs: no transaction stays open, so the job's progress updates are visible (and
    vacuum is not held back) while it runs. A record that arrives meanwhile is included when it
    sorts after the rows already written; none is written twice.
    """
    base = export_values(queryset).values_list(*_FIELDS, "id")
    after: Q | None = None
    while True:
        rows = list(_typed((base if after is None else base.filter(after))[:page]))
        for row in rows:
            yield row[:-1]
        if len(rows) < page:
            return
        ts, pk = rows[-1][_TS], rows[-1][-1]
        # ts >= the last ts bounds the index scan; the OR alone would not.
        after = Q(ts__gte=ts) & (Q(ts__gt=ts) | Q(id__gt=pk))


def neutralise(value: str) -> str:
    """Make a cell a spreadsheet shows as text instead of running it as a formula."""
    return "'" + value if value[:1] in _TRIGGER_SET else value


def batched(rows: Iterable[Row], size: int) -> Iterator[list[Row]]:
    batch: list[Row] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def counting(rows: Iterable[Row], every: int, report: Callable[[int], None]) -> Iterator[Row]:
    """Pass rows through, calling report(rows so far) every `every` rows and at the end."""
    count = 0
    for row in rows:
        yield row
        count += 1
        if count % every == 0:
            report(count)
    report(count)


# --- JSONL ---------------------------------------------------------------------------------


def jsonl_chunks(rows: Iterable[Row], *, batch: int = 1000) -> Iterator[bytes]:
    dumps, fragment, option = orjson.dumps, orjson.Fragment, orjson.OPT_UTC_Z
    for chunk in batched(rows, batch):
        lines = [
            dumps(
                {
                    "id": r[0],
                    "kind": r[1],
                    "run_id": r[2],
                    "ts": r[3],
                    "session_id": r[4],
                    "agent": r[5],
                    "parent_run_id": r[6],
                    "release": r[7],
                    # Already JSON text from the database: spliced in as is.
                    "data": fragment(r[_DATA]),
                    "derived": fragment(_with_cost(r[_DERIVED], r[_COST], r[_SOURCE], r[_MODEL])),
                },
                option=option,
            )
            for r in chunk
        ]
        lines.append(b"")
        yield b"\n".join(lines)


def _with_cost(derived: str, nano: int | None, source: str | None, model: str | None) -> str:
    """`derived` as JSON text with `cost` added as the read API adds it (api.serializers), spliced
    into the text so that the rest of it is never decoded."""
    cost = describe(nano, source, model)
    if cost is None:
        return derived
    body = derived.rstrip()[:-1].rstrip()  # the object without its closing brace
    joiner = "" if body.endswith("{") else ","
    return f'{body}{joiner}"cost":{orjson.dumps(cost).decode()}}}'


def usd_text(nano: int | None) -> str:
    """nano-USD as exact decimal USD text: 12345678 → "0.012345678"; None → ""."""
    if nano is None:
        return ""
    sign = "-" if nano < 0 else ""
    whole, frac = divmod(abs(nano), NANO_PER_USD)
    return f"{sign}{whole}.{frac:09d}".rstrip("0").rstrip(".") if frac else f"{sign}{whole}"


# --- CSV -------------------------------------------------------------------------------------
# RFC 4180 lines built by hand, one expression a row: the csv module escapes a cell a character at
# a time, which made it the slowest step for the ~1 KB JSON cells, and a formatter call per cell
# cost as much again. tests/live/test_exports.py reads the output back with the csv module.

_needs_quotes = re.compile(r'[",\r\n]').search


def csv_text(value: str | None) -> str:
    """Free text: neutralised when it starts like a formula, quoted when it must be."""
    if not value:
        return ""
    value = neutralise(value)
    if _needs_quotes(value):
        return '"' + value.replace('"', '""') + '"'
    return value


def csv_timestamp(value: datetime) -> str:
    """A timestamp as ISO 8601, UTC written as Z."""
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def csv_line(row: Row) -> str:
    (id_, kind, run_id, ts, session_id, agent, parent_run_id, release, model, iteration, latency_ms,
     skip_reason, outcome, is_swap, is_fallback, is_error, is_contract_break, tokens_in,
     tokens_out, cost_nano, cost_source, data, derived) = row  # fmt: skip
    return ",".join(
        (
            csv_text(id_),
            kind,  # a fixed vocabulary of dotted words, like skip_reason
            csv_text(run_id),
            csv_timestamp(ts),
            csv_text(session_id),
            csv_text(agent),
            csv_text(parent_run_id),
            csv_text(release),
            csv_text(model),
            "" if iteration is None else str(iteration),
            "" if latency_ms is None else str(latency_ms),
            skip_reason or "",
            csv_text(outcome),
            "true" if is_swap else "false",
            "true" if is_fallback else "false",
            "true" if is_error else "false",
            "true" if is_contract_break else "false",
            "" if tokens_in is None else str(tokens_in),
            "" if tokens_out is None else str(tokens_out),
            usd_text(cost_nano),
            cost_source or "",  # a fixed vocabulary (records.contract.cost.SOURCES)
            # JSON objects: they start with `{`, never like a formula, and always need quotes.
            '"' + data.replace('"', '""') + '"',
            '"' + derived.replace('"', '""') + '"',
        )
    )


def csv_chunks(rows: Iterable[Row], *, batch: int = 1000) -> Iterator[bytes]:
    yield (",".join(COLUMNS) + "\r\n").encode()
    for chunk in batched(rows, batch):
        lines = [csv_line(r) for r in chunk]
        lines.append("")
        yield "\r\n".join(lines).encode()


# --- Parquet ---------------------------------------------------------------------------------


def parquet_schema():
    import pyarrow as pa  # imported here: the web process needs it only for Parquet exports

    text = pa.string()
    types = {
        "ts": pa.timestamp("us", tz="UTC"),
        "iteration": pa.int32(),
        "latency_ms": pa.float64(),
        "tokens_in": pa.int64(),
        "tokens_out": pa.int64(),
        "cost_usd": pa.float64(),
        **{c: pa.bool_() for c in FACET_COLUMNS if c.startswith("is_")},
    }
    return pa.schema(
        [
            pa.field(c, types.get(c, text), nullable=c not in ("id", "kind", "run_id", "ts"))
            for c in COLUMNS
        ],
        metadata={
            "data": "JSON text",
            "derived": "JSON text",
            "cost_usd": "USD; null without usage or when cost_source is unknown",
        },
    )


class _Spool(io.RawIOBase):
    """A write-only file that hands back what was written since the last drain()."""

    def __init__(self) -> None:
        super().__init__()
        self._parts: list[bytes] = []
        self._position = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self._parts.append(bytes(data))
        self._position += len(data)
        return len(data)

    def tell(self) -> int:
        return self._position

    def drain(self) -> bytes:
        out = b"".join(self._parts)
        self._parts.clear()
        return out


# Rows a row group: each is built in memory (Python rows, then Arrow arrays) before it is
# written, so this bounds what a streaming export adds to a web process's memory with pyarrow
# loaded (bench/export.py holds the web peak to its goal whatever the row count).
PARQUET_ROW_GROUP = 5_000


def parquet_chunks(rows: Iterable[Row], *, row_group: int = PARQUET_ROW_GROUP) -> Iterator[bytes]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = parquet_schema()
    spool = _Spool()
    with pq.ParquetWriter(spool, schema, compression="zstd") as writer:
        for chunk in batched(rows, row_group):
            columns = list(zip(*chunk, strict=True))
            columns[_COST] = [None if n is None else n / NANO_PER_USD for n in columns[_COST]]
            writer.write_batch(
                pa.record_batch(
                    [pa.array(col, type=f.type) for col, f in zip(columns, schema, strict=True)],
                    schema=schema,
                )
            )
            yield spool.drain()
    yield spool.drain()  # the footer, written on close


WRITERS: dict[str, Callable[[Iterable[Row]], Iterator[bytes]]] = {
    "csv": csv_chunks,
    "jsonl": jsonl_chunks,
    "parquet": parquet_chunks,
}


def export_chunks(fmt: str, rows: Iterable[Row]) -> Iterator[bytes]:
    """The export file, as byte chunks, of `rows` from export_rows()."""
    return WRITERS[fmt](rows)

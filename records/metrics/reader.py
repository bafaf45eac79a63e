"""The one reader of rollup rows: the metrics API, the pages and the alert engine all read here.

`read` returns the rows of one grain whose bucket lies in [start, end) (start truncated to the
grain), of the kinds, agents and releases asked for, as `Row`s that the metric definitions of
records.metrics.definitions fold. Two reads keep a page or an alert tick cheap:

- rows of the *sketch kinds* (those whose latency quantiles are wanted) come one per stored row
  (one per cell of the columns kept, when several releases share it), with the sketch parsed
  once into a `Sketch`; summed over the columns not kept, in Python
  (sketches merge by adding bins, which SQL cannot do on our JSON);
- rows of every other kind come without their sketch, summed by the database over the columns
  not kept (`keep`): an hour of a busy project is a few hundred rows per agent, and most pages
  and rules need neither the agent nor the bucket of a count.

The release is never kept: a read sums over the releases it asks for (all of them when it asks
for none), so a read without `releases` gives what it gave before releases were a dimension.
A column left out reads "" (the bucket: `start` truncated to the grain). Every metric's
contribution is linear in a row's count, tokens and sketch for a given kind, agent, model and
key, so summed rows fold to what the stored rows fold to.

Buckets and sketches travel as text: a read of tens of thousands of rows shares a few dozen
buckets, and Django's per-value converters (a regex per timestamp, json.loads per sketch) were
the largest cost of a page.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache

import orjson
from django.db import connection, connections, router

from records.contract.buckets import truncate
from records.contract.sketch import Sketch
from records.models import Grain, Rollup

COLUMNS = ("bucket", "kind", "agent", "model", "key")


@dataclass(frozen=True, slots=True)
class Row:
    bucket: datetime
    kind: str
    agent: str
    model: str
    key: str
    count: int
    tokens_in: int
    tokens_out: int
    # A parsed Sketch for the sketch kinds; {} (or a stored JSON dict, in tests) otherwise.
    sketch: Sketch | dict
    # The summed latency_sum column, when read with `latency_sums` (records.catchup.tool_funnel
    # keeps the ranked tools' score sums there); 0.0 otherwise.
    latency_sum: float = 0.0
    # Spend in nano-USD, records with usage, and those of them with no known price
    # (records.contract.cost); 0 for the kinds that carry no usage.
    cost_nano: int = 0
    cost_records: int = 0
    cost_unknown: int = 0


def as_sketch(value: Sketch | dict) -> Sketch:
    return value if isinstance(value, Sketch) else Sketch.from_json(value)


def merge_into(sketch: Sketch, value: Sketch | dict) -> None:
    """Merge a row's sketch (a Sketch, or its stored JSON when read unparsed) into `sketch`."""
    if isinstance(value, Sketch):
        sketch.merge(value)
    else:
        sketch.merge_stored(value)


def read(
    project_id: int,
    grain: str,
    start: datetime,
    end: datetime,
    *,
    kinds: Iterable[str] = (),
    agents: list[str] | None = None,
    releases: list[str] | None = None,
    sketch_kinds: Iterable[str] = (),
    keep: tuple[str, ...] = COLUMNS,
    parse_sketches: bool = False,
    latency_sums: bool = False,
    key_prefix: str | None = None,
) -> list[Row]:
    """The rows of `grain` in [start, end), of `kinds` (every kind when empty), `agents` and
    `releases` ("" is the records that named none), summed over the columns not in `keep`
    and over the releases; rows of `sketch_kinds` with their sketches.

    A sketch comes as its stored JSON ({bin: count}), which a page merges as is and parses once
    per model and bucket; `parse_sketches` makes each a Sketch, for a reader that folds the same
    rows many times (the alert engine: a thousand rules). Summed rows carry Sketches.
    `latency_sums` adds the summed latency_sum column to the rows summed by the database;
    `key_prefix` keeps the rows whose key starts so (one tool's rows:
    records.contract.rollup_keys.encode)."""
    first = truncate(start, grain)
    where, params = _where(project_id, grain, first, end, agents, key_prefix, releases)
    kinds = tuple(kinds)
    sketch_kinds = tuple(k for k in sketch_kinds if not kinds or k in kinds)
    rows: list[Row] = []
    if sketch_kinds:
        rows += _with_sketches(*_of_kinds(where, params, sketch_kinds), first, keep, parse_sketches)
    if kinds:
        plain_kinds = [k for k in kinds if k not in sketch_kinds]
        if plain_kinds:
            rows += _summed(*_of_kinds(where, params, plain_kinds), first, keep, latency_sums)
    elif sketch_kinds:
        rows += _summed(*_of_kinds(where, params, sketch_kinds, exclude=True), first, keep,
                        latency_sums)  # fmt: skip
    else:
        rows += _summed(where, params, first, keep, latency_sums)
    return rows


def any_key(project_id: int, grain: str, kinds: Iterable[str], key_prefix: str) -> bool:
    """Whether the project has a row of `grain` and `kinds` whose key starts with
    `key_prefix`, in any bucket kept. For the day rows of the tool kinds (a tool's name,
    records.contract.rollup_keys.escape'd, then "|") one probe of index rollup_tool_key."""
    kinds = list(kinds)
    sql = (
        f'SELECT 1 FROM {_TABLE} WHERE "project_id" = %s AND "grain" = %s '
        f'AND "kind" IN ({", ".join(["%s"] * len(kinds))}) '
        f'AND "key" {connection.operators["startswith"] % "%s"} LIMIT 1'
    )
    params = [project_id, Grain(grain).value, *kinds,
              connection.ops.prep_for_like_query(key_prefix) + "%"]  # fmt: skip
    return bool(_fetch(sql, params))


def first_bucket(
    project_id: int, grain: str, *, agents: list[str] | None = None, releases: list[str]
) -> datetime | None:
    """The earliest bucket of `grain` holding a row of `releases` (and `agents`), in any bucket
    kept: when a release's records begin. None when it has none."""
    where, params = _where(project_id, grain, _EPOCH, _FAR, agents, None, releases)
    ((first,),) = _fetch(f'SELECT CAST(MIN("bucket") AS text) FROM {_TABLE} {where}', params)
    return time_of(first) if first else None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FAR = datetime(9999, 1, 1, tzinfo=UTC)


# The reads below are written out: every page and metrics call makes one to four of them, and
# the ORM took longer to build and compile each than the database took to run most.
# One text for both databases (CAST, positional GROUP BY); values adapted as the ORM adapts
# them (datetimes for SQLite, LIKE with its escapes).
_TABLE = Rollup._meta.db_table


def _where(
    project_id: int,
    grain: str,
    first: datetime,
    end: datetime,
    agents: list[str] | None,
    key_prefix: str | None,
    releases: list[str] | None = None,
) -> tuple[str, list]:
    """The rows of `grain` whose bucket is in [first, end), of `agents` and `releases` (all
    when None or empty) and of keys starting with `key_prefix`: SQL and its parameters."""
    ops = connection.ops
    sql = 'WHERE "project_id" = %s AND "grain" = %s AND "bucket" >= %s AND "bucket" < %s'
    params = [project_id, Grain(grain).value, ops.adapt_datetimefield_value(first),
              ops.adapt_datetimefield_value(end)]  # fmt: skip
    if agents:
        sql += f' AND "agent" IN ({", ".join(["%s"] * len(agents))})'
        params += agents
    if releases:
        sql += f' AND "release" IN ({", ".join(["%s"] * len(releases))})'
        params += releases
    if key_prefix is not None:
        sql += ' AND "key" ' + connection.operators["startswith"] % "%s"
        params.append(ops.prep_for_like_query(key_prefix) + "%")
    return sql, params


def _of_kinds(where: str, params: list, kinds: Iterable[str], exclude: bool = False):
    """`where` narrowed to the rows of `kinds` (or to the others, `exclude`), with its params."""
    kinds = list(kinds)
    kind_in = f'"kind" {"NOT " if exclude else ""}IN ({", ".join(["%s"] * len(kinds))})'
    return f"{where} AND {kind_in}", [*params, *kinds]


def _fetch(sql: str, params: list) -> list[tuple]:
    # The rollups' database for reads: a replica inside config.replicas.reading_replica.
    with connections[router.db_for_read(Rollup)].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _summed(
    where: str, params: list, first: datetime, keep: tuple[str, ...], latency_sums: bool = False
) -> list[Row]:
    """Rows of `where` summed by the database over the columns not in `keep`."""
    kept = ", ".join('CAST("bucket" AS text)' if c == "bucket" else f'"{c}"' for c in keep)
    sums = ", ".join(f'CAST(SUM("{c}") AS bigint)' for c in _SUMMED)
    if latency_sums:
        sums += ', SUM("latency_sum")'
    # SUM of a bigint is a numeric, which psycopg would hand over as a Decimal per value.
    summed = _fetch(
        f"SELECT {kept + ', ' if keep else ''}{sums} FROM {_TABLE} {where}"
        + (f" GROUP BY {', '.join(str(i + 1) for i in range(len(keep)))}" if keep else ""),
        params,
    )
    if keep == COLUMNS and not latency_sums:  # the common case, unpacked as it comes
        return [
            Row(bucket_of(b), kind, agent, model, key, n, t_in, t_out, {}, 0.0, c, c_n, c_u)
            for b, kind, agent, model, key, n, t_in, t_out, c, c_n, c_u in summed
        ]
    places = _places(keep)
    width = len(keep)
    out = []
    for values in summed:
        if not keep and values[0] is None:
            continue  # no row at all: SUM over nothing is one row of NULLs
        n, t_in, t_out, *costs = values[width : width + len(_SUMMED)]
        latency_sum = float(values[width + len(_SUMMED)] or 0.0) if latency_sums else 0.0
        out.append(_row(values, places, first, n, t_in, t_out, {}, latency_sum, *costs))
    return out


# The columns a read adds up, in the order a Row holds them.
_SUMMED = ("count", "tokens_in", "tokens_out", "cost_nano", "cost_records", "cost_unknown")


def _with_sketches(
    where: str, params: list, first: datetime, keep: tuple[str, ...], parse: bool
) -> list[Row]:
    stored = _fetch(
        'SELECT CAST("bucket" AS text), "kind", "agent", "model", "key", "count", "tokens_in", '
        f'"tokens_out", "cost_nano", "cost_records", "cost_unknown", CAST("sketch" AS text) '
        f"FROM {_TABLE} {where}",
        params,
    )
    # One Row per stored row while no two of them differ by their release alone: a cell of every
    # kept column stays one Row, however many releases its records named.
    if keep == COLUMNS and len({values[:5] for values in stored}) == len(stored):
        load = _sketch if parse else orjson.loads
        return [
            Row(bucket_of(b), kind, agent, model, key, n, t_in, t_out, load(text), 0.0, c, cn, cu)
            for b, kind, agent, model, key, n, t_in, t_out, c, cn, cu, text in stored
        ]
    # Summed here: merge each kept cell's sketches (into a copy, never a stored row's).
    kept_at = [COLUMNS.index(c) for c in keep]
    cells: dict[tuple, list] = {}
    for *values, n, t_in, t_out, c, cn, cu, text in stored:
        cell_key = tuple(values[i] for i in kept_at)
        cell = cells.get(cell_key)
        if cell is None:
            cells[cell_key] = [n, t_in, t_out, _sketch(text), 0.0, c, cn, cu]
            continue
        cell[0] += n
        cell[1] += t_in
        cell[2] += t_out
        cell[3].merge_stored(orjson.loads(text))
        cell[5] += c
        cell[6] += cn
        cell[7] += cu
    places = _places(keep)
    return [_row(kept, places, first, *cell) for kept, cell in cells.items()]


def _places(keep: tuple[str, ...]) -> tuple[int | None, ...]:
    """Where each of COLUMNS is among the kept values (None: not kept)."""
    return tuple(keep.index(c) if c in keep else None for c in COLUMNS)


def _row(kept, places, first: datetime, n, t_in, t_out, sketch, latency_sum=0.0, *costs) -> Row:
    """A Row of the kept values (placed by _places): a column not kept is the range's first
    bucket or ""."""
    b, kind, agent, model, key = places
    return Row(
        bucket_of(kept[b]) if b is not None else first,
        kept[kind] if kind is not None else "",
        kept[agent] if agent is not None else "",
        kept[model] if model is not None else "",
        kept[key] if key is not None else "",
        n, t_in, t_out, sketch, latency_sum, *costs,
    )  # fmt: skip


def _sketch(text: str) -> Sketch:
    return Sketch.from_json(orjson.loads(text))


def time_of(text: str) -> datetime:
    """A time as the database writes it as text: PostgreSQL "2026-11-30 09:00:00.5+00", SQLite
    "2026-11-30 09:00:00.500000" (UTC)."""
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@lru_cache(maxsize=8192)
def bucket_of(text: str) -> datetime:
    """A bucket as text (time_of): a read's rows share a few dozen, parsed once each."""
    return time_of(text)

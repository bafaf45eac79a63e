"""Price stored records again after a project's price override changed, and move what the
catch-up already folded of them by the difference.

An override (records.models.PriceOverride) created, changed or deleted changes the price of
one model (from one provider, or any) from its `effective_from` on. Its records from the
earliest affected moment are priced again with the project's overrides as they now stand
(records.contract.cost.price, as ingest prices them). A record whose cost changed gets its
cost columns rewritten; if the catch-up already folded it (its id is at most its lane's
watermark), its minute, hour and day rollup rows and its run move by the difference. A record
the catch-up has yet to fold only needs its columns: the pass folds the new cost.

Each chunk is one transaction that holds the lane's watermark row, as a pass does
(records.catchup.lanes.lock_watermark): no pass folds the same records meanwhile, so each
record is moved exactly once, either here or by the pass.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime

import msgspec
import orjson
from django.db import connection, transaction
from django.db.models import Q

from records.catchup.lanes import configured_lanes, lock_watermark
from records.catchup.passes import ensure_lanes
from records.catchup.sql_helpers import db_time
from records.contract.buckets import truncate
from records.contract.cost import Cost, price
from records.contract.kinds import KINDS
from records.contract.rollup_keys import MODEL_CALL, PICK
from records.models import Grain, Record, Rollup, Run
from records.store.ingest_pricing import project_overrides

log = logging.getLogger(__name__)

CHUNK = 5_000
_GRAINS = (Grain.MINUTE, Grain.HOUR, Grain.DAY)


def reprice(project_id: int, model: str, provider: str, since: datetime) -> int:
    """Price again the project's records of `model` (from `provider`; any when "") with a ts
    from `since` on; returns how many records changed cost."""
    changed = 0
    after: tuple[datetime, int] | None = None
    while True:
        with transaction.atomic():
            lanes = configured_lanes()
            watermark = lock_watermark(project_id % lanes, lanes)
            if watermark is not None:
                records = _chunk(project_id, model, provider, since, after)
                if not records:
                    return changed
                changed += _reprice_chunk(project_id, records, watermark.last_id)
        if watermark is None:
            # No lanes of this count yet (no pass ran, or the count is changing): make them as
            # a pass would, then hold one.
            ensure_lanes(lanes)
            continue
        after = (records[-1].ts, records[-1].id)
        if len(records) < CHUNK:
            log.info("re-priced %s records of %s (%s) from %s", changed, model, provider, since)
            return changed


def _chunk(project_id, model, provider, since, after) -> list[Record]:
    # A pick names no provider (records.contract.derive.derive_pick): an override for one
    # provider never prices it.
    kinds = [MODEL_CALL] if provider else [MODEL_CALL, PICK]
    rows = Record.objects.filter(
        project_id=project_id, ts__gte=since, kind__in=kinds, model=model, cost_source__isnull=False
    )
    if after is not None:
        rows = rows.filter(Q(ts__gt=after[0]) | Q(ts=after[0], id__gt=after[1]))
    fields = ("id", "ts", "kind", "agent", "model", "rollup_key", "run_id", "release", "data")
    return list(rows.order_by("ts", "id").only(*fields, "cost_nano", "cost_source")[:CHUNK])


def _reprice_chunk(project_id: int, records: list[Record], folded_upto: int) -> int:
    overrides = project_overrides(project_id)
    updated: list[Record] = []
    cells: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])  # [nano, unknown] deltas
    runs: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for record in records:
        usage = _usage(record)
        if usage is None:
            continue
        cost: Cost = price(usage, record.ts, overrides)
        if (cost.nano, cost.source) == (record.cost_nano, record.cost_source):
            continue
        nano = (cost.nano or 0) - (record.cost_nano or 0)
        unknown = (cost.nano is None) - (record.cost_nano is None)
        record.cost_nano, record.cost_source = cost.nano, cost.source
        updated.append(record)
        if record.id > folded_upto:
            continue  # the pass folds its new cost
        for grain in _GRAINS:
            key = (grain, truncate(record.ts, grain), record.kind, record.agent or "",
                   record.model or "", record.rollup_key, record.release or "")  # fmt: skip
            cells[key][0] += nano
            cells[key][1] += unknown
        runs[record.run_id][0] += nano
        runs[record.run_id][1] += unknown
    if updated:
        Record.objects.bulk_update(updated, ["cost_nano", "cost_source"], batch_size=1000)
    _move_rollups(project_id, cells)
    _move_runs(project_id, runs)
    return len(updated)


def _usage(record: Record):
    """The usage ingest priced, derived again from the record's data."""
    spec = KINDS[record.kind]
    data = record.data if isinstance(record.data, dict) else orjson.loads(record.data)
    return spec.derive(msgspec.convert(data, spec.data_type)).usage


_ROLLUP_MOVE = f"""
UPDATE {Rollup._meta.db_table} SET cost_nano = cost_nano + %s, cost_unknown = cost_unknown + %s
WHERE project_id = %s AND grain = %s AND bucket = %s AND kind = %s AND agent = %s
AND model = %s AND key = %s AND release = %s
"""
_RUN_MOVE = f"""
UPDATE {Run._meta.db_table} SET cost_nano = cost_nano + %s, cost_unknown = cost_unknown + %s
WHERE project_id = %s AND run_id = %s
"""


def _move_rollups(project_id: int, cells: dict[tuple, list[int]]) -> None:
    """Add the deltas to rows the catch-up wrote: an UPDATE, never an insert (a folded record's
    rows exist; a moved row must not appear where none was)."""
    rows = [
        (nano, unknown, project_id, grain, db_time(bucket), kind, agent, model, key, release)
        for (grain, bucket, kind, agent, model, key, release), (nano, unknown) in cells.items()
        if nano or unknown
    ]
    if rows:
        with connection.cursor() as cursor:
            cursor.executemany(_ROLLUP_MOVE, rows)


def _move_runs(project_id: int, runs: dict[str, list[int]]) -> None:
    rows = [
        (nano, unknown, project_id, run_id)
        for run_id, (nano, unknown) in sorted(runs.items())  # one lock order, as passes
        if nano or unknown
    ]
    if rows:
        with connection.cursor() as cursor:
            cursor.executemany(_RUN_MOVE, rows)

"""Derive the stored hybrid turns again: a hybrid turn keeps the envelope rules for every text, so
one of plain text and no call, stored until now as `chat`, is `unparseable`, as the same turn
sent as envelope is.

Self-contained: the rule of the time (a hybrid turn without calls whose text is not empty takes
the envelope's decision), the turn's rollup key and the latency sketch's bins are written out
here, so that later changes to the live derivation never change what this migration does.

Only hybrid turns are read, WINDOW ids a transaction from the first hybrid turn's, and only
those whose derived columns change are written. A turn the catch-up already folded in (its id at most its lane's
watermark) also moves its count, latency and latency bin from its old turn rollup row to its
new one, in the minute, hour and day of its `ts`, in the transaction that rewrites it; that
transaction holds every lane's watermark row, so no catch-up pass folds meanwhile. A row left
at count 0 goes. A turn not folded yet is folded by the catch-up with its new derivation.
Nothing else the catch-up keeps depends on a turn's decision (its tool calls, run summary and
flags stay as they were), so the pages count the turns right when the migration ends, without
`manage.py rebuild_rollups`, and the rollups older than the records' retention are kept as
they are (their records are gone: a turn counted there stays where it was counted).

Not one transaction (atomic = False): a large records table is not rewritten under one. Run
again after an interruption, it finds the turns already derived again unchanged, and neither
writes nor moves them twice. On PostgreSQL the records are updated by id through the
partitioned table, as `manage.py rebuild_rollups` does.
"""

from collections import defaultdict
from datetime import UTC

import math

import orjson
from django.db import migrations, transaction
from django.db.models import Max, Min, Q

# Ids a transaction: a range of the primary key, read by its index whatever the planner makes
# of the JSON condition (a LIMIT could make it sort the whole table for each batch instead).
WINDOW = 5000
TURN = "turn"
WATERMARK = "rollups"  # a lane's watermark: "rollups", or "rollups:i/n" with n lanes
GRAINS = ("minute", "hour", "day")
# What a record adds to the rollup row of its own kind (records.catchup.passes): the row it goes to
# (model, rollup_key) and what it adds there.
_CELL_COLUMNS = ("model", "rollup_key", "latency_ms", "tokens_in", "tokens_out")
# The columns a turn's decision is written in.
_DECISION_COLUMNS = ("outcome", "rollup_key", "derived")
# The latency sketch's bins: 1 % relative accuracy, values at or below MIN_POSITIVE apart.
_LOG_GAMMA = math.log((1 + 0.01) / (1 - 0.01))
_MIN_POSITIVE = 1e-9
_ENVELOPE_STEPS = {"actions": "action", "sub-agent": "subAgent", "chat": "chat"}


def _bin_of(value):
    return None if value <= _MIN_POSITIVE else math.ceil(math.log(value) / _LOG_GAMMA)


def _envelope_decision(text):
    """The decision of a turn whose decision is the JSON envelope in its text."""
    try:
        envelope = orjson.loads(text)
    except orjson.JSONDecodeError:
        return "unparseable"
    if not isinstance(envelope, dict):
        return "unparseable"
    if envelope.get("taskComplete") is True:
        return "taskComplete"
    step = envelope.get("nextStep")
    if isinstance(step, dict) and isinstance(step.get("type"), str):
        return _ENVELOPE_STEPS.get(step["type"].lower(), "other")
    if envelope.get("payloadChangeRequest"):
        return "payloadChange"
    return "other"


def _escape(value):
    text = "" if value is None else str(value)
    return text.replace("%", "%25").replace("|", "%7C")


def _decision_columns(data, stored):
    """A hybrid turn's decision columns (outcome, rollup key, derived) under the envelope rules.

    Only a turn without calls whose text is not empty was derived otherwise before; a control
    call, an action call or an empty text decide the same under both.
    """
    derived = dict(stored["derived"] or {})
    text = data.get("text") if isinstance(data.get("text"), str) else ""
    if derived.get("calls") or not text.strip():
        return stored
    decision = _envelope_decision(text)
    derived["decision"] = decision
    invented = "1" if derived.get("invented") else "0"
    key = "|".join((_escape(decision), _escape(derived.get("protocol")), invented))
    return {"outcome": decision, "rollup_key": key, "derived": derived}


def _bucket(ts, grain):
    ts = ts.astimezone(UTC).replace(second=0, microsecond=0)
    if grain == "minute":
        return ts
    ts = ts.replace(minute=0)
    return ts if grain == "hour" else ts.replace(hour=0)


def _folded_upto(Watermark, db):
    """A function of a project id: the id up to which its lane is folded. Locks the lanes'
    watermark rows, which a catch-up pass holds while it folds, until the transaction ends."""
    rows = (
        Watermark.objects.using(db)
        .select_for_update()
        .filter(Q(name=WATERMARK) | Q(name__startswith=WATERMARK + ":"))
        .values_list("name", "last_id")
    )
    marks, lanes = {}, 1  # lane rows of one count only ever exist at a time
    for name, last_id in rows:
        lane, lanes = (0, 1) if name == WATERMARK else map(int, name.split(":")[1].split("/"))
        marks[lane] = last_id
    return lambda project_id: marks.get(project_id % lanes, 0)


def _no_delta():
    return {"count": 0, "tokens_in": 0, "tokens_out": 0, "latency_sum": 0.0, "sketch": {}}


def _move(deltas, record, old, new):
    """Take the record's share from its old row and add it to its new one, at every grain."""
    for sign, cell in ((-1, old), (1, new)):
        latency = cell["latency_ms"]
        for grain in GRAINS:
            key = (record.project_id, grain, _bucket(record.ts, grain), TURN, record.agent or "",
                   cell["model"] or "", cell["rollup_key"])  # fmt: skip
            delta = deltas[key]
            delta["count"] += sign
            delta["tokens_in"] += sign * (cell["tokens_in"] or 0)
            delta["tokens_out"] += sign * (cell["tokens_out"] or 0)
            if latency is not None:
                delta["latency_sum"] += sign * latency
                index = _bin_of(latency)
                name = "z" if index is None else str(index)
                delta["sketch"][name] = delta["sketch"].get(name, 0) + sign


def _apply(Rollup, db, deltas):
    """Add the deltas to the stored rollup rows: a row left at count 0 goes."""
    wanted = defaultdict(lambda: (set(), set()))  # (project, grain) -> (buckets, keys)
    for project, grain, bucket, _kind, _agent, _model, key in deltas:
        buckets, keys = wanted[(project, grain)]
        buckets.add(bucket)
        keys.add(key)
    stored = {}
    for (project, grain), (buckets, keys) in wanted.items():
        rows = Rollup.objects.using(db).filter(
            project_id=project, grain=grain, kind=TURN, bucket__in=buckets, key__in=keys
        )
        for row in rows:
            stored[(project, grain, row.bucket, TURN, row.agent, row.model, row.key)] = row
    changed, created, emptied = [], [], []
    for cell, delta in deltas.items():
        row = stored.get(cell)
        if row is None:
            if delta["count"] <= 0:
                continue  # nothing counted there to take back (turns that moved both ways)
            project, grain, bucket, kind, agent, model, key = cell
            row = Rollup(project_id=project, grain=grain, bucket=bucket, kind=kind, agent=agent,
                         model=model, key=key, count=0, sketch={})  # fmt: skip
            created.append(row)
        else:
            changed.append(row)
        row.count += delta["count"]
        row.tokens_in += delta["tokens_in"]
        row.tokens_out += delta["tokens_out"]
        row.latency_sum += delta["latency_sum"]
        sketch = dict(row.sketch or {})
        for name, count in delta["sketch"].items():
            sketch[name] = sketch.get(name, 0) + count
        row.sketch = {name: count for name, count in sketch.items() if count > 0}
        if row.count <= 0 and row.pk is not None:
            emptied.append(row.pk)
    changed = [row for row in changed if row.count > 0]
    Rollup.objects.using(db).filter(pk__in=emptied).delete()
    Rollup.objects.using(db).bulk_update(
        changed, ["count", "tokens_in", "tokens_out", "latency_sum", "sketch"], batch_size=1000
    )
    Rollup.objects.using(db).bulk_create(created, batch_size=1000)


def rederive(apps, schema_editor):
    Record = apps.get_model("records", "Record")
    Rollup = apps.get_model("records", "Rollup")
    Watermark = apps.get_model("records", "Watermark")
    db = schema_editor.connection.alias
    hybrid = Record.objects.using(db).filter(kind=TURN, data__protocol="hybrid")
    span = hybrid.aggregate(first=Min("id"), top=Max("id"))
    if span["first"] is None:
        return
    columns = ("id", "project", "ts", "agent", "data", *_CELL_COLUMNS, *_DECISION_COLUMNS)
    # From the first hybrid turn: the ids below it (records past retention, other kinds) would
    # be windows of nothing, a query each.
    for low in range(span["first"] - 1, span["top"], WINDOW):
        with transaction.atomic(using=db):
            window = hybrid.filter(id__gt=low, id__lte=low + WINDOW)
            rewritten = []
            for record in window.only(*columns):
                data = record.data if isinstance(record.data, dict) else orjson.loads(record.data)
                old = {name: getattr(record, name) for name in (*_CELL_COLUMNS, *_DECISION_COLUMNS)}
                new = {**old, **_decision_columns(data, old)}
                if new != old:
                    rewritten.append((record, old, new))
            if not rewritten:
                continue
            folded_upto = _folded_upto(Watermark, db)
            deltas = defaultdict(_no_delta)
            for record, old, new in rewritten:
                moved = any(old[name] != new[name] for name in _CELL_COLUMNS)
                if moved and record.id <= folded_upto(record.project_id):
                    _move(deltas, record, old, new)
                for name in _DECISION_COLUMNS:
                    setattr(record, name, new[name])
            Record.objects.using(db).bulk_update(
                [record for record, _, _ in rewritten], _DECISION_COLUMNS, batch_size=1000
            )
            _apply(Rollup, db, deltas)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("records", "0025_pending_batch")]

    operations = [migrations.RunPython(rederive, migrations.RunPython.noop)]

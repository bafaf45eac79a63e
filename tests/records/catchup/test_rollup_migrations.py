"""Migrations that give rollups stored before them the rows of a new derived kind: 0017 merges
the latency sketches stored on pick rows into PICK_LATENCY rows, 0018 counts the folded runs in
RUN_LAST rows; 0026, which derives the stored hybrid turns again and moves them in the
rollups; and 0039, which gives the CLASSIFICATION rows the key's new cause field."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from importlib import import_module

import orjson
import pytest
from django.apps import apps
from django.db import connection
from django.utils import timezone

from records.contract import rollup_keys
from records.contract.rollup_keys import PICK, PICK_ERROR, PICK_LATENCY, RUN_LAST
from records.contract.sketch import Sketch
from records.metrics import definitions
from records.models import Grain, Project, Rollup
from tests.support.factories import record
from tests.support.migrations import latest, migrate
from tests.support.release_data import DAY_1, ladders, post_all
from tests.support.services import Persona

BEFORE = [("records", "0016_updated_tables_fillfactor")]
BEFORE_RUN_LAST = [("records", "0017_pick_latency_rollups")]
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


@pytest.fixture
def migrated_back(transactional_db):
    """Migrate back with the function this yields, which returns the models of the schema it
    migrated to; forwards to the latest again after."""
    yield migrate
    migrate(latest())


@pytest.mark.both_dbs
def test_the_pick_rows_latencies_become_one_merged_row_per_model_and_bucket(migrated_back):
    old = migrated_back(BEFORE)
    OldProject, OldRollup = old.get_model("records", "Project"), old.get_model("records", "Rollup")
    rng = random.Random(17)
    project = OldProject.objects.create(name="acme")
    latencies: dict[tuple, list[float]] = {}  # (grain, bucket, agent, model) -> every latency
    sums: dict[tuple, float] = {}
    stored = []
    for grain, bucket in ((Grain.MINUTE, T0), (Grain.MINUTE, T0 + timedelta(minutes=1)),
                          (Grain.HOUR, T0)):  # fmt: skip
        for agent in ("bot", "crawler"):
            for model in ("haiku", ""):
                for kind, key in ((PICK, "none"), (PICK, "too_few_tools"), (PICK_ERROR, "none")):
                    values = [rng.lognormvariate(5, 1) for _ in range(rng.randrange(1, 9))]
                    sketch = Sketch()
                    sketch.extend(values)
                    cell = (grain, bucket, agent, model)
                    latencies.setdefault(cell, []).extend(values)
                    sums[cell] = sums.get(cell, 0.0) + sum(values)
                    stored.append(
                        OldRollup(
                            project=project,
                            grain=grain,
                            bucket=bucket,
                            kind=kind,
                            agent=agent,
                            model=model,
                            key=key,
                            count=len(values) + 1,
                            latency_sum=sum(values),
                            sketch=sketch.to_json(),
                        )  # fmt: skip
                    )
    # A pick row without latencies (none of its records had one) adds nothing.
    stored.append(OldRollup(project=project, grain=Grain.MINUTE, bucket=T0, kind=PICK,
                            agent="bot", model="sonnet", key="none", count=3))  # fmt: skip
    OldRollup.objects.bulk_create(stored)
    counts = sorted(
        OldRollup.objects.filter(kind__in=(PICK, PICK_ERROR)).values_list("id", "count")
    )

    migrate(latest())

    merged = {
        (r.grain, r.bucket, r.agent, r.model): r
        for r in Rollup.objects.filter(project_id=project.pk, kind=PICK_LATENCY)
    }
    assert set(merged) == set(latencies)
    for cell, values in latencies.items():
        row = merged[cell]
        want = Sketch()
        want.extend(values)
        assert (row.key, row.count, row.sketch) == ("", len(values), want.to_json())
        assert row.latency_sum == pytest.approx(sums[cell])
    picks = Rollup.objects.filter(kind__in=(PICK, PICK_ERROR))
    assert sorted(picks.values_list("id", "count")) == counts
    assert all(r.sketch == {} and r.latency_sum == 0 for r in picks)
    # The metric reads the merged rows: the p95 of every latency of the minute, both kinds and
    # every skip reason.
    got = definitions.query_metric(project_id=project.pk, name="classifier_latency_p95",
                               interval="minute", start=T0, end=T0 + timedelta(minutes=1),
                               group_by="model", models=["haiku"])  # fmt: skip
    want = Sketch()
    want.extend(latencies[(Grain.MINUTE, T0, "bot", "haiku")])
    want.extend(latencies[(Grain.MINUTE, T0, "crawler", "haiku")])
    assert got["totals"] == [
        {"group": {"model": "haiku"}, "value": round(want.quantile(0.95), 6), "count": want.count}
    ]

    migrate(BEFORE)

    assert not Rollup.objects.filter(kind=PICK_LATENCY).exists()


@pytest.mark.both_dbs
def test_the_folded_runs_are_counted_in_the_buckets_of_their_last_records(migrated_back):
    old = migrated_back(BEFORE_RUN_LAST)
    project = old.get_model("records", "Project").objects.create(name="acme")
    ends = {  # run -> (agent, last_ts, records folded)
        "a": ("bot", T0 + timedelta(seconds=5), 3),
        "b": ("bot", T0 + timedelta(seconds=50), 1),
        "c": ("bot", T0 + timedelta(minutes=1), 2),  # the next minute, the same hour
        "d": (None, T0 + timedelta(hours=15), 4),  # the next day; no agent
        "e": ("bot", T0, 0),  # stored by ingest, not folded yet: not counted
    }
    OldRun = old.get_model("records", "Run")
    OldRun.objects.bulk_create(
        OldRun(
            project=project,
            run_id=run_id,
            agent=agent,
            first_ts=T0,
            last_ts=last,
            record_count=n,
            created_at=T0,
        )  # fmt: skip
        for run_id, (agent, last, n) in ends.items()
    )

    migrate(latest())

    def counts(grain):
        stored = Rollup.objects.filter(project_id=project.pk, kind=RUN_LAST, grain=grain)
        return {(r.bucket, r.agent, r.model, r.key): r.count for r in stored}

    day = T0.replace(hour=0)
    assert counts(Grain.MINUTE) == {
        (T0, "bot", "", ""): 2,
        (T0 + timedelta(minutes=1), "bot", "", ""): 1,
        (T0 + timedelta(hours=15), "", "", ""): 1,
    }
    assert counts(Grain.HOUR) == {(T0, "bot", "", ""): 3, (T0 + timedelta(hours=15), "", "", ""): 1}
    assert counts(Grain.DAY) == {(day, "bot", "", ""): 3, (day + timedelta(days=1), "", "", ""): 1}

    migrate(BEFORE_RUN_LAST)

    assert not Rollup.objects.filter(kind=RUN_LAST).exists()


BEFORE_BROKEN_INDEX = [("records", "0023_watermark_last_fold_at")]


def test_a_dirty_minute_gets_the_end_of_its_verdicts(migrated_back, postgres):
    """0024: the streak recompute keeps a dirty minute's stored end, so the minutes dirty when
    it runs get theirs from their verdicts (before it, a late verdict left the end alone)."""
    from records.models import StreakSegment

    old = migrated_back(BEFORE_BROKEN_INDEX)
    project = old.get_model("records", "Project").objects.create(name="acme")
    OldRecord = old.get_model("records", "Record")
    OldSegment = old.get_model("records", "StreakSegment")
    ends = {
        "clean": ("a", T0 + timedelta(seconds=30)),
        "dirty": ("dirty-b", T0 + timedelta(seconds=40)),
    }
    for model in ("clean", "dirty"):
        for key, second in (("a", 10), ("b", 40), ("c", 20)):
            OldRecord.objects.create(
                project=project, record_key=f"{model}-{key}", kind="classifier.verdict",
                run_id="r", ts=T0 + timedelta(seconds=second), received_at=T0, model=model,
                outcome="allow", data={},
            )  # fmt: skip
        OldSegment.objects.create(
            project=project, model=model, grain=Grain.MINUTE, bucket=T0, has_ruling=True,
            last_ts=T0 + timedelta(seconds=30), last_key="a", dirty=model == "dirty",
        )  # fmt: skip

    migrate(latest())

    stored = {
        s.model: (s.last_key, s.last_ts)
        for s in StreakSegment.objects.filter(project_id=project.pk)
    }
    assert stored == ends  # the clean minute's end is left as it was


BEFORE_HYBRID = [("records", "0025_pending_batch")]
HYBRID_TEXTS = {  # text (no call) -> its decision, under hybrid as under envelope
    "Which order do you mean?": "unparseable",  # plain text: derived as `chat` before 0026
    "Done, the refund is issued.": "unparseable",
    '{"taskComplete": true}': "taskComplete",
    '{"nextStep": {"type": "Chat"}}': "chat",
}


def _turns(n: int, start: datetime, agent: str) -> list[dict]:
    """Turns of every protocol over a few minutes and hours, some with a latency."""
    rng = random.Random(n)
    out = []
    for i in range(n):
        protocol = rng.choice(["hybrid", "hybrid", "envelope", "implicit"])
        data = {"protocol": protocol, "text": rng.choice(list(HYBRID_TEXTS))}
        if rng.random() < 0.2:
            data["toolCalls"] = [{"name": "search-docs"}]
            data["toolNameMap"] = {"search-docs": "search_docs"}
        if rng.random() < 0.7:
            data["durationMs"] = rng.choice([0.0, 12.5, 900.0, rng.lognormvariate(6, 1)])
        ts = start + timedelta(minutes=rng.randrange(3), hours=rng.randrange(2), seconds=i)
        raw = record("turn", agent=agent, run_id=f"run-{i % 7}",
                     ts=ts.isoformat().replace("+00:00", "Z"))  # fmt: skip
        raw["data"] = data  # in full: no calls but these
        out.append(raw)
    return out


def _store_as_before(project: Project, raws: list[dict], now: datetime) -> int:
    """Store the turns as the derivation before 0026 did: a hybrid turn of plain text and no
    call was a `chat`. Returns how many were so. Today's ingest writes the columns of the latest
    schema: call it there, before migrating back."""
    from records.contract.normalise import normalise
    from records.store.writer import store_records

    rows, old = [], 0
    for raw in raws:
        row = normalise(raw, now=now)
        derived = orjson.loads(row.derived_json)
        if derived["protocol"] == "hybrid" and derived["decision"] == "unparseable":
            derived["decision"] = "chat"
            key = {**rollup_keys.decode(rollup_keys.TURN, row.rollup_key), "decision": "chat"}
            row = dataclasses.replace(row, outcome="chat",
                                      rollup_key=rollup_keys.encode(rollup_keys.TURN, key),
                                      derived_json=orjson.dumps(derived).decode())  # fmt: skip
            old += 1
        rows.append(row)
    assert store_records(project.pk, rows, now).accepted == len(rows)
    return old


def _rollups() -> tuple[dict[tuple, tuple], dict[tuple, float]]:
    """Every rollup row's counts and sketch, and apart its latency sum (added in another order
    by a migration than by a rebuild)."""
    rows = {(r.project_id, r.grain, r.bucket, r.kind, r.agent, r.model, r.key): r
            for r in Rollup.objects.all()}  # fmt: skip
    counts = {cell: (r.count, r.tokens_in, r.tokens_out, r.sketch) for cell, r in rows.items()}
    return counts, {cell: r.latency_sum for cell, r in rows.items()}


def _decisions(project: Project, day: datetime) -> dict[tuple, int]:
    """Turns by (decision, protocol) over two days, as the metrics API counts them from the
    rollups."""
    got = definitions.query_metric(project_id=project.pk, name="invented_tool_rate", interval="day",
                               start=day, end=day + timedelta(days=2))  # fmt: skip
    return {(t["group"]["decision"], t["group"]["protocol"]): t["count"] for t in got["totals"]}


@pytest.mark.both_dbs
def test_stored_hybrid_turns_of_plain_text_read_as_envelope_turns_after_migrating(
    migrated_back, monkeypatch
):
    """0026: the stored hybrid turns are derived again, and the turns already folded in move
    to their new rollup rows; those not folded yet are folded with their new derivation."""
    from records import catchup
    from records.catchup.rebuild import rebuild
    from records.contract.normalise import normalise
    from records.models import Record, Watermark

    now = timezone.now()
    start = (now - timedelta(hours=5)).replace(minute=0, second=0, microsecond=0)
    day = start.replace(hour=0)
    # Two projects in two catch-up lanes, so that one lane's watermark passes the other's.
    acme, globex = Project.objects.create(name="acme"), Project.objects.create(name="globex")
    lanes = 2
    assert catchup.lane_of(acme.pk, lanes) != catchup.lane_of(globex.pk, lanes)
    old = _store_as_before(acme, _turns(60, start, "bot"), now)
    old += _store_as_before(globex, _turns(40, start, "crawler"), now)
    catchup.catch_up(lanes=lanes)
    # Stored after that pass: acme's lane folds them, globex's do not.
    old += _store_as_before(acme, _turns(30, start + timedelta(minutes=1), "bot"), now)
    old += _store_as_before(globex, _turns(20, start + timedelta(minutes=1), "bot"), now)
    catchup.catch_up(lane=catchup.lane_of(acme.pk, lanes), lanes=lanes)
    marks = dict(Watermark.objects.values_list("name", "last_id"))
    latest_globex = Record.objects.filter(project=globex).order_by("-id")[0].id
    assert marks[catchup.lane_name(catchup.lane_of(globex.pk, lanes), lanes)] < latest_globex
    assert old > 10
    assert _decisions(acme, day)[("chat", "hybrid")] > 0
    assert ("unparseable", "hybrid") not in _decisions(acme, day)
    # Ingested and folded at the latest schema, which today's code writes; migrating back
    # leaves these rows as they are (no migration after 0025 changes data when reversed) and
    # drops the later columns.
    migrated_back(BEFORE_HYBRID)

    # Many windows of ids, their edges falling between the turns of either project.
    monkeypatch.setattr(import_module("records.migrations.0026_rederive_hybrid_turns"), "WINDOW", 7)
    migrate(latest())

    # Every stored turn is derived as a fresh ingest derives it: a hybrid turn as envelope.
    for r in Record.objects.all():
        sent = {"id": r.record_key, "kind": r.kind, "run_id": r.run_id, "ts": r.ts.isoformat(),
                "agent": r.agent, "data": r.data}  # fmt: skip
        fresh = normalise(sent, now=now)
        assert (r.outcome, r.rollup_key) == (fresh.outcome, fresh.rollup_key)
        assert r.derived == orjson.loads(fresh.derived_json)
        if r.data["protocol"] == "hybrid" and "toolCalls" not in r.data:
            assert r.outcome == HYBRID_TEXTS[r.data["text"]]
    # The folded turns counted in their new rows: acme's pages are right before any pass.
    migrated = _decisions(acme, day)
    assert migrated == Counter(
        (r.outcome, r.data["protocol"]) for r in Record.objects.filter(project=acme)
    )
    assert ("chat", "hybrid") in migrated  # the envelopes that name a chat step
    catchup.catch_up(lanes=lanes)
    assert _decisions(acme, day) == migrated
    after, latencies = _rollups()

    # What a rebuild from the records writes, row for row.
    rebuild({model.__name__: model for model in apps.get_app_config("records").get_models()})
    catchup.catch_up(lanes=lanes)
    rebuilt, rebuilt_latencies = _rollups()
    assert rebuilt == after
    assert rebuilt_latencies == pytest.approx(latencies, abs=1e-6)


@pytest.mark.both_dbs
def test_a_classification_folded_before_causes_moves_from_the_row_its_key_was_renamed_to(
    migrated_back,
):
    alice = Persona("acme")
    post_all(alice.client(), ladders("v1", DAY_1, 2, 0, 0))  # two classifications the seat ruled

    def keys() -> Counter:
        counts = Counter()
        for key, count in Rollup.objects.filter(
            kind=rollup_keys.CLASSIFICATION, grain=Grain.DAY
        ).values_list("key", "count"):
            counts[key] += count
        return counts

    migrated_back([("records", "0038_rollup_release_index")])  # as stored before causes
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT key FROM records_rollup WHERE kind = %s", [rollup_keys.CLASSIFICATION]
        )
        assert {key for (key,) in cursor.fetchall()} == {"0"}
    migrate(latest())
    assert keys() == {"0|": 2}

    # One of them walks on to rung 1: its count leaves the renamed row, and with no seat
    # attempt kept its cause is unknown, counted under no cause.
    walked = ladders("v1", DAY_1, 1, 1, 0)[1]
    walked["id"] = "late-rung-1"
    post_all(alice.client(), [walked])
    assert keys() == {"0|": 1, "1|": 1}
    body = alice.client(alice.read_key).get(
        "/api/v1/metrics/ladder_fallback_rate",
        {"interval": "day", "from": "2026-11-01T00:00:00Z", "to": "2026-11-03T00:00:00Z",
         "group_by": "reason"},
    ).json()  # fmt: skip
    assert {t["group"]["reason"]: t["value"] for t in body["totals"]} == dict.fromkeys(
        ("parse_error", "timeout", "error", "unavailable", "ruled"), 0
    )

"""Migrations that give rollups stored before them the rows of a new derived kind: 0017 merges
the latency sketches stored on pick rows into PICK_LATENCY rows, 0018 counts the folded runs in
RUN_LAST rows."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from records import metrics
from records.keys import PICK, PICK_ERROR, PICK_LATENCY, RUN_LAST
from records.models import Grain, Project, Rollup, Run
from records.sketch import Sketch
from tests.test_partition_migration import latest, migrate

BEFORE = [("records", "0016_updated_tables_fillfactor")]
BEFORE_RUN_LAST = [("records", "0017_pick_latency_rollups")]
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


@pytest.fixture
def migrated_back(transactional_db):
    """Migrate back with the function this yields; forwards to the latest again after."""
    yield migrate
    migrate(latest())


@pytest.mark.both_dbs
def test_the_pick_rows_latencies_become_one_merged_row_per_model_and_bucket(migrated_back):
    migrated_back(BEFORE)
    rng = random.Random(17)
    project = Project.objects.create(name="acme")
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
                        Rollup(
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
    stored.append(Rollup(project=project, grain=Grain.MINUTE, bucket=T0, kind=PICK,
                         agent="bot", model="sonnet", key="none", count=3))  # fmt: skip
    Rollup.objects.bulk_create(stored)
    counts = sorted(Rollup.objects.filter(kind__in=(PICK, PICK_ERROR)).values_list("id", "count"))

    migrate(latest())

    merged = {
        (r.grain, r.bucket, r.agent, r.model): r
        for r in Rollup.objects.filter(project=project, kind=PICK_LATENCY)
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
    got = metrics.query_metric(project_id=project.pk, name="classifier_latency_p95",
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
    migrated_back(BEFORE_RUN_LAST)
    project = Project.objects.create(name="acme")
    ends = {  # run -> (agent, last_ts, records folded)
        "a": ("bot", T0 + timedelta(seconds=5), 3),
        "b": ("bot", T0 + timedelta(seconds=50), 1),
        "c": ("bot", T0 + timedelta(minutes=1), 2),  # the next minute, the same hour
        "d": (None, T0 + timedelta(hours=15), 4),  # the next day; no agent
        "e": ("bot", T0, 0),  # stored by ingest, not folded yet: not counted
    }
    Run.objects.bulk_create(
        Run(
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
        stored = Rollup.objects.filter(project=project, kind=RUN_LAST, grain=grain)
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
    from records.models import Record, StreakSegment

    migrated_back(BEFORE_BROKEN_INDEX)
    project = Project.objects.create(name="acme")
    ends = {
        "clean": ("a", T0 + timedelta(seconds=30)),
        "dirty": ("dirty-b", T0 + timedelta(seconds=40)),
    }
    for model in ("clean", "dirty"):
        for key, second in (("a", 10), ("b", 40), ("c", 20)):
            Record.objects.create(
                project=project, record_key=f"{model}-{key}", kind="classifier.verdict",
                run_id="r", ts=T0 + timedelta(seconds=second), received_at=T0, model=model,
                outcome="allow", data={},
            )  # fmt: skip
        StreakSegment.objects.create(
            project=project, model=model, grain=Grain.MINUTE, bucket=T0, has_ruling=True,
            last_ts=T0 + timedelta(seconds=30), last_key="a", dirty=model == "dirty",
        )  # fmt: skip

    migrate(latest())

    stored = {
        s.model: (s.last_key, s.last_ts) for s in StreakSegment.objects.filter(project=project)
    }
    assert stored == ends  # the clean minute's end is left as it was

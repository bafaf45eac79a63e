"""Catch-up lanes (records.catchup.passes): N lanes give exactly the rollups of one, whatever the
corpus, the interleaving of the lanes' passes and a change of N half way; and the workers run one
task per lane."""

from __future__ import annotations

import random

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from config.beat_schedule import beat_schedule
from records import catchup
from records.metrics.freshness import freshness
from records.models import Project, Record, Rollup
from tests.support import rollup_data
from tests.support.factories import record
from tests.support.rollup_data import newest_id, rollup_snapshot, start_at, store_now
from workers import dispatch, tasks

pytestmark = pytest.mark.both_dbs


def _notices(n: int, seed: int) -> list[dict]:
    """Once-per-run notices, some runs twice or more: the pass flags the repeats by reading
    what is already folded of the run (records.catchup.upserts.flag_repeated_notices)."""
    rng = random.Random(seed)
    return [
        record("notice", id=f"notice-{seed}-{i}", run_id=f"run-{rng.randrange(12)}",
               data={"code": "classifier.role_defaulted", "level": "warn", "message": "m",
                     "detail": {"reason": "main_only", "model": "gpt-5"}})
        for i in range(n)
    ]  # fmt: skip


def corpus(n: int, seed: int) -> list[dict]:
    records = rollup_data.build(n, seed=seed) + _notices(max(1, n // 20), seed)
    random.Random(seed).shuffle(records)
    return records


def _lanes_in_use() -> dict[str, int]:
    return dict(catchup.lane_watermarks().values_list("name", "last_id"))


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    n=st.integers(10, 160),
    seed=st.integers(0, 10_000),
    projects=st.integers(1, 5),
    lanes=st.integers(1, 4),
    then=st.one_of(st.none(), st.integers(1, 4)),
    batch=st.integers(5, 80),
    chunks=st.integers(1, 3),
    order=st.randoms(use_true_random=False),
)
def test_lanes_equal_one_lane(db, n, seed, projects, lanes, then, batch, chunks, order):
    """The same records, in several projects: once folded by one lane in one catch-up, once
    by `lanes` lanes whose passes interleave at random while the records arrive in `chunks`,
    switching to `then` lanes half way. Every project's rollups, streaks, run summaries and
    classifications come out identical."""
    records = corpus(n, seed)
    parts = [records[i::projects] for i in range(projects)]
    with transaction.atomic():
        start_at(newest_id())
        reference = [Project.objects.create(name=f"one-lane-{i}") for i in range(projects)]
        for project, part in zip(reference, parts, strict=True):
            store_now(project, part)
        catchup.catch_up(lanes=1, max_seconds=600)
        want = [rollup_snapshot(project) for project in reference]

        laned = [Project.objects.create(name=f"laned-{i}") for i in range(projects)]
        current = lanes
        for chunk in range(chunks):
            for project, part in zip(laned, parts, strict=True):
                store_now(project, part[chunk::chunks])
            if then is not None and chunk == chunks // 2:
                # Some lanes ahead of others, then the count changes (a live reconfiguration).
                for _ in range(order.randrange(4)):
                    catchup.run_pass(batch, lane=order.randrange(current), lanes=current)
                current = then
            for _ in range(order.randrange(1, 6)):
                catchup.run_pass(batch, lane=order.randrange(current), lanes=current)
        catchup.catch_up(lanes=current, batch_size=batch, max_seconds=600)

        assert [rollup_snapshot(project) for project in laned] == want
        assert set(_lanes_in_use()) == {catchup.lane_name(i, current) for i in range(current)}
        assert set(_lanes_in_use().values()) == {newest_id()}
        transaction.set_rollback(True)


def _one_lane(parts: list[list[dict]]) -> list[tuple]:
    """Each part stored in a project of its own and folded by one lane in one catch-up: what
    the lanes must give. (Projects of their own: a pass flags repeated notices in the records
    themselves, so the same records folded twice would differ.)"""
    start_at(newest_id())
    projects = [Project.objects.create(name=f"one-lane-{i}") for i in range(len(parts))]
    for project, part in zip(projects, parts, strict=True):
        store_now(project, part)
    catchup.catch_up(lanes=1, max_seconds=600)
    return [rollup_snapshot(project) for project in projects]


def test_a_change_of_lanes_folds_the_lagging_lanes_up_to_the_leader_first(db):
    """Four lanes, one far ahead: switching to two must neither skip what the laggards had not
    folded nor fold again what the leader had (both would show in the counts)."""
    records = corpus(200, seed=11)
    parts = [records[i::4] for i in range(4)]
    want = _one_lane(parts)
    projects = [Project.objects.create(name=f"p{i}") for i in range(4)]
    for project, part in zip(projects, parts, strict=True):
        store_now(project, part)
    first = (
        Record.objects.filter(project=projects[0]).order_by("id").values_list("id", flat=True)[0]
    )
    start_at(first - 1, lanes=4)
    leader = catchup.lane_of(projects[0].pk, 4)
    catchup.catch_up(lane=leader, lanes=4, max_seconds=600)  # one lane at the end, three behind
    marks = _lanes_in_use()
    assert marks[catchup.lane_name(leader, 4)] == newest_id()
    assert sorted(marks.values())[:3] == [first - 1] * 3

    result = catchup.run_pass(20, lane=0, lanes=2)  # the first pass of two lanes switches
    assert set(_lanes_in_use()) == {"rollups:0/2", "rollups:1/2"}
    assert result.records == 0  # every record was folded by the old lanes on the way
    laned = [rollup_snapshot(project) for project in projects]
    assert laned == want
    assert Record.objects.filter(project__in=projects).count() == sum(
        sum(run[2].values()) for snapshot in laned for run in snapshot[2]
    )


def test_a_worker_on_the_old_count_switches_back_without_loss(db):
    """A rolling restart: workers of 3 and of 1 lane take turns. Each switch is a whole one."""
    records = corpus(150, seed=12)[:150]
    want = _one_lane([records[i::3] for i in range(3)])
    projects = [Project.objects.create(name=f"p{i}") for i in range(3)]
    for step, count in enumerate((3, 1, 3, 2, 1)):
        chunk = records[step * 30 : (step + 1) * 30]
        for i, project in enumerate(projects):
            store_now(project, chunk[i::3])
        catchup.run_pass(15, lane=count - 1, lanes=count)
    catchup.catch_up(lanes=2, max_seconds=600)
    assert [rollup_snapshot(project) for project in projects] == want


def test_a_lane_folds_only_its_own_projects(db):
    start_at(newest_id())
    projects = [Project.objects.create(name=f"p{i}") for i in range(2)]
    for project in projects:
        store_now(project, corpus(40, seed=project.pk))
    start_at(newest_id() - 100, lanes=2)  # both lanes before every record of both projects
    mine, other = sorted(projects, key=lambda p: catchup.lane_of(p.pk, 2) != 0)
    folded = catchup.catch_up(lane=0, lanes=2)
    assert folded == Record.objects.filter(project=mine).count()
    assert Rollup.objects.filter(project=mine).exists()
    assert not Rollup.objects.filter(project=other).exists()
    # Freshness is the worst lane's: lane 1 still holds every record of `other`.
    state = freshness()
    assert state["watermark_id"] == newest_id() - 100
    lanes = {lane["lane"]: lane for lane in state["lanes"]}
    assert lanes[0]["pending_records"] == 0 and lanes[0]["lag_seconds"] == 0
    oldest_other = Record.objects.filter(project=other).order_by("id").first()
    assert lanes[1]["pending_records"] == newest_id() - oldest_other.id + 1
    assert state["pending_records"] == lanes[1]["pending_records"]
    assert state["lag_seconds"] == lanes[1]["lag_seconds"] > 0


def test_beat_sends_one_catch_up_task_per_lane():
    schedule = beat_schedule(3)
    lanes = {k: v for k, v in schedule.items() if v["task"] == "workers.tasks.catch_up_task"}
    assert sorted(e["args"] for e in lanes.values()) == [(0,), (1,), (2,)]
    assert all(e["schedule"] <= 10 and e["options"]["queue"] == "default" for e in lanes.values())
    assert {k for k in beat_schedule(1) if k.startswith("catch-up")} == {"catch-up-lane-0"}


def test_the_lane_task_folds_its_lane_and_skips_one_it_does_not_have(db, settings):
    settings.DECISIONBOARD = {**settings.DECISIONBOARD, "CATCHUP_LANES": 2}
    start_at(newest_id())
    projects = [Project.objects.create(name=f"p{i}") for i in range(2)]
    for project in projects:
        store_now(project, corpus(30, seed=project.pk))
    start_at(newest_id() - 100, lanes=2)
    tasks.catch_up_task.apply(args=(1,))
    marks = _lanes_in_use()
    assert marks["rollups:1/2"] == newest_id() and marks["rollups:0/2"] == newest_id() - 100
    tasks.catch_up_task.apply(args=(5,))  # from a beat that counts more lanes: nothing
    assert _lanes_in_use() == marks
    tasks.catch_up_task.apply()  # an old message without a lane: every lane
    assert set(_lanes_in_use().values()) == {newest_id()}


@pytest.fixture
def nudges(settings, monkeypatch):
    """Ingest's nudges on, with what would go to the broker recorded instead."""
    settings.DECISIONBOARD = {**settings.DECISIONBOARD, "NUDGE_WORKERS": True, "CATCHUP_LANES": 4}
    sent = []
    monkeypatch.setattr(
        tasks.catch_up_task, "apply_async", lambda args, **options: sent.append(args)
    )
    from django.core.cache import cache

    cache.clear()
    return sent


def test_ingest_nudges_the_lane_of_its_project_once_a_debounce(alice, nudges, monkeypatch):
    # A debounce the three posts cannot outlast on a busy machine (the rule, not the second).
    monkeypatch.setattr(dispatch, "DEBOUNCE_SECONDS", 600)
    lane = catchup.lane_of(alice.project.pk, 4)
    for _ in range(3):
        response = alice.client().post("/api/v1/records", record(), format="json")
        assert response.status_code == 200
    assert nudges == [(lane,)]
    assert dispatch.request_catch_up(alice.project.pk + 1)  # another lane: its own debounce
    assert nudges == [(lane,), ((lane + 1) % 4,)]


def test_metrics_show_each_lane_and_the_worst_one(db, settings):
    """/metrics, parsed as Prometheus would: a lane no worker ran shows its age and lag."""
    from django.test import Client

    from tests.support.metrics_scrape import TOKEN, parse, value

    settings.DECISIONBOARD = {**settings.DECISIONBOARD, "METRICS_TOKEN": TOKEN}
    start_at(newest_id())
    projects = [Project.objects.create(name=f"p{i}") for i in range(2)]
    for project in projects:
        store_now(project, corpus(30, seed=project.pk))
    start_at(newest_id() - 100, lanes=2)
    catchup.catch_up(lane=0, lanes=2)
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    samples = parse(response.content.decode())
    assert value(samples, "decisionboard_catchup_lane_watermark_id", lane="0") == newest_id()
    assert value(samples, "decisionboard_catchup_lane_watermark_id", lane="1") == newest_id() - 100
    assert value(samples, "decisionboard_catchup_lane_lag_seconds", lane="0") == 0
    lag = value(samples, "decisionboard_catchup_lane_lag_seconds", lane="1")
    assert lag > 0 and value(samples, "decisionboard_catchup_lag_seconds") == lag
    assert value(samples, "decisionboard_catchup_lane_last_pass_age_seconds", lane="0") < 60
    assert value(samples, "decisionboard_catchup_lane_last_pass_age_seconds", lane="1") == float(
        "inf"
    )
    assert value(samples, "decisionboard_catchup_last_pass_age_seconds") == float("inf")


def test_two_lane_processes_at_once_equal_one_lane(transactional_db, postgres, tmp_path):
    """The lanes as workers run them: two processes folding at the same time, each its lane."""
    import os
    import sys

    from tests.support.services import database_url
    from workers import processes

    records = corpus(600, seed=21)
    parts = [records[i::4] for i in range(4)]
    want = _one_lane(parts)
    projects = [Project.objects.create(name=f"p{i}") for i in range(4)]
    for project, part in zip(projects, parts, strict=True):
        store_now(project, part)
    first = Record.objects.filter(project__in=projects).order_by("id").values_list("id", flat=True)
    start_at(first[0] - 1, lanes=2)
    env = dict(os.environ, DATABASE_URL=database_url(), DECISIONBOARD_VAR_DIR=str(tmp_path))
    workers = []
    for lane in range(2):
        code = (
            f"from records.catchup import catch_up; catch_up(lane={lane}, lanes=2, batch_size=50)"
        )
        log = open(tmp_path / f"lane-{lane}.log", "w")  # noqa: SIM115 (closed below)
        cmd = [sys.executable, "manage.py", "shell", "-c", code]
        workers.append((processes.spawn(cmd, env=env, log=log), log))
    for worker, log in workers:
        assert worker.wait(timeout=120) == 0, (tmp_path / "lane-0.log").read_text()
        log.close()
    assert [rollup_snapshot(project) for project in projects] == want
    assert set(_lanes_in_use().values()) == {newest_id()}

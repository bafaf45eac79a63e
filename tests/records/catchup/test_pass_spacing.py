"""The workers' catch-up spaces its passes (records.catchup.passes.PASS_SPACING_SECONDS): a pass
starts at least that long after the start of the lane's last pass that folded records, one
process waits for it, and the others leave the records to that one."""

from __future__ import annotations

import threading
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from records import catchup
from records.catchup import passes
from records.models import Project, Record, Watermark
from records.store import locks
from tests.support.factories import record
from tests.support.rollup_data import newest_id, start_at, store_now

SPACING = 0.6
BATCH = 10**9  # the window is a range of ids: ids do not restart between tests


def _watermark() -> Watermark:
    return Watermark.objects.get(name=catchup.lane_name(0, 1))


def _post(project: Project, n: int, start: int) -> None:
    store_now(project, [record(id=f"s-{start + i}", run_id=f"run-{start + i}") for i in range(n)])


@pytest.fixture
def lane(transactional_db, postgres):
    start_at(newest_id())
    return Project.objects.create(name="spaced")


def test_a_spaced_pass_starts_the_spacing_after_the_last_pass_that_folded(lane):
    _post(lane, 3, 0)
    first = catchup.run_pass(BATCH, spacing=SPACING)
    assert first.records == 3
    folded_at = _watermark().last_fold_at
    assert folded_at is not None

    _post(lane, 2, 10)
    second = catchup.run_pass(BATCH, spacing=SPACING)
    assert second.records == 2 and second.caught_up
    started = _watermark().last_fold_at
    assert started - folded_at >= timedelta(seconds=SPACING)


def test_an_empty_pass_moves_the_liveness_not_the_spacing(lane):
    _post(lane, 1, 0)
    catchup.run_pass(BATCH)
    folded_at = _watermark().last_fold_at
    empty = catchup.run_pass(BATCH)
    assert empty.records == 0
    mark = _watermark()
    assert mark.last_pass_at > folded_at  # the catch-up is alive
    assert mark.last_fold_at == folded_at


def test_a_pass_long_after_the_last_fold_does_not_wait(lane):
    _post(lane, 1, 0)
    catchup.run_pass(BATCH)
    Watermark.objects.filter(pk=_watermark().pk).update(
        last_fold_at=timezone.now() - timedelta(seconds=60)
    )
    _post(lane, 1, 10)
    before = timezone.now()
    assert catchup.run_pass(BATCH, spacing=60).records == 1
    assert _watermark().last_fold_at - before < timedelta(seconds=5)


def test_a_pass_waits_no_longer_than_the_spacing_after_a_clock_ahead(lane):
    """A last fold stamped by a machine whose clock runs a minute ahead: the pass still waits
    only the spacing, then folds."""
    _post(lane, 1, 0)
    catchup.run_pass(BATCH)
    Watermark.objects.filter(pk=_watermark().pk).update(
        last_fold_at=timezone.now() + timedelta(seconds=60)
    )
    _post(lane, 3, 10)
    before = timezone.now()
    assert catchup.run_pass(BATCH, spacing=SPACING).records == 3
    waited = _watermark().last_fold_at - before
    assert timedelta(seconds=SPACING) <= waited < timedelta(seconds=30)


def test_a_second_waiter_leaves_the_records_to_the_first(lane):
    """While another session holds the lane's waiter lock, a spaced pass returns at once,
    caught up and folding nothing; once it is free, the pass waits and folds them."""
    _post(lane, 1, 0)
    catchup.run_pass(BATCH)
    _post(lane, 4, 10)
    other = _other_session()
    try:
        taken = other.execute(
            "SELECT pg_try_advisory_lock(%s, %s)", [locks.PASS_WAITER_LOCK_CLASS, 0]
        ).fetchone()[0]
        assert taken
        skipped = catchup.run_pass(BATCH, spacing=60)
        assert (skipped.records, skipped.caught_up) == (0, True)
        assert _watermark().last_id == skipped.last_id < newest_id()
        other.execute("SELECT pg_advisory_unlock(%s, %s)", [locks.PASS_WAITER_LOCK_CLASS, 0])
    finally:
        other.close()
    assert catchup.run_pass(BATCH, spacing=SPACING).records == 4
    # The waiter released its lock: the next waiter can take it.
    assert _try_waiter_lock()


def test_the_waiter_frees_its_lock_before_its_pass(lane, monkeypatch):
    """A task that gets the lane's lock after the waiter's pass finds the waiter lock free, so
    it waits and folds what arrived during that pass, rather than leaving it to nobody."""
    _post(lane, 1, 0)
    catchup.run_pass(BATCH)
    _post(lane, 2, 10)
    free_during_pass = []
    fold = passes.fold_lane_pass

    def fold_seen_from_another_session(*args, **kwargs):
        free_during_pass.append(_try_waiter_lock_elsewhere())
        return fold(*args, **kwargs)

    monkeypatch.setattr(passes, "fold_lane_pass", fold_seen_from_another_session)
    assert catchup.run_pass(BATCH, spacing=SPACING).records == 2
    assert free_during_pass == [True]


def _try_waiter_lock_elsewhere() -> bool:
    other = _other_session()
    try:
        return other.execute(
            "SELECT pg_try_advisory_lock(%s, %s)", [locks.PASS_WAITER_LOCK_CLASS, 0]
        ).fetchone()[0]
    finally:
        other.close()


def _other_session() -> psycopg.Connection:
    params = connection.get_connection_params()
    return psycopg.connect(
        **{k: v for k, v in params.items() if k not in ("cursor_factory", "context")},
        autocommit=True,
    )


def test_two_processes_at_once_make_one_spaced_pass_between_them(lane):
    """Two catch-up tasks nudged together: one waits out the spacing and folds everything, the
    other returns at once (the records are left to the waiter)."""
    _post(lane, 1, 0)
    catchup.run_pass(BATCH)
    _post(lane, 6, 10)
    results = []

    def task():
        try:
            results.append(catchup.catch_up(lane=0, lanes=1, spacing=SPACING))
        finally:
            connection.close()

    threads = [threading.Thread(target=task) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(results) == [0, 6]
    assert _watermark().last_id == newest_id()
    assert Record.objects.filter(project=lane).count() == 7


def _try_waiter_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [locks.PASS_WAITER_LOCK_CLASS, 0])
        taken = cursor.fetchone()[0]
        cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [locks.PASS_WAITER_LOCK_CLASS, 0])
        return taken


def test_no_two_advisory_locks_share_a_key():
    assert len(set(locks.SINGLE_KEYS)) == len(locks.SINGLE_KEYS)
    assert locks.PASS_WAITER_LOCK_CLASS not in locks.SINGLE_KEYS

"""Rollups and the metrics API against exact values computed from the same records."""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from records import catchup
from records.catchup import batch, passes, reads, streak_fold
from records.contract.buckets import GRAINS, truncate
from records.contract.rollup_keys import RUN_LAST
from records.models import (
    Grain,
    Project,
    Record,
    Rollup,
    Run,
    Streak,
    StreakSegment,
    Watermark,
)
from records.store.backends import BACKENDS
from records.store.backends.postgresql_store import read_ahead
from tests.support import rollup_data
from tests.support.factories import record
from tests.support.plans import node_types, plan_nodes, scans_of
from tests.support.rollup_data import forget_rollups, rollup_snapshot
from tests.support.services import Persona, database_url
from workers import processes

pytestmark = pytest.mark.both_dbs
RANGE = {"from": "2026-11-20T00:00:00Z", "to": "2026-11-21T00:00:00Z", "interval": "day"}


def ingest(persona, records, batch=300):
    client = persona.client()
    for i in range(0, len(records), batch):
        response = client.post(
            "/api/v1/records", {"records": records[i : i + batch]}, format="json"
        )
        assert response.status_code == 200, response.content


def metric(persona, name, **params):
    response = persona.client(persona.read_key).get(f"/api/v1/metrics/{name}", {**RANGE, **params})
    assert response.status_code == 200, response.content
    return response.json()


def totals(body, field="model"):
    return {
        tuple(t["group"].values())[0] if field else tuple(t["group"].values()): (
            t["value"],
            t["count"],
        )
        for t in body["totals"]
    }


@pytest.fixture
def mix(alice):
    records = rollup_data.build()
    ingest(alice, records)
    assert catchup.catch_up() == len(records)
    return records


def _approx(got, want, rel=1e-9):
    assert set(got) == set(want), (got, want)
    for key in want:
        assert got[key][1] == want[key][1], key
        assert got[key][0] == pytest.approx(want[key][0], rel=rel), key


@pytest.mark.parametrize("q", [50, 95, 99])
def test_it_computes_classifier_latency_quantiles_within_one_percent(alice, mix, q):
    want = rollup_data.exact(mix)[f"classifier_latency_p{q}"]
    _approx(totals(metric(alice, f"classifier_latency_p{q}")), want, rel=0.01)


def test_it_computes_the_pick_error_rate(alice, mix):
    _approx(totals(metric(alice, "pick_error_rate")), rollup_data.exact(mix)["pick_error_rate"])


def test_it_computes_the_narrowing_skip_rate_overall_and_by_reason(alice, mix):
    exact = rollup_data.exact(mix)
    _approx(totals(metric(alice, "narrowing_skip_rate")), exact["narrowing_skip_rate"])
    by_reason = totals(metric(alice, "narrowing_skip_rate", group_by="reason"))
    _approx(by_reason, exact["narrowing_skip_rate_by_reason"])


def test_it_computes_first_pick_agreement(alice, mix):
    body = metric(alice, "first_pick_agreement")
    (total,) = body["totals"]
    want_value, want_count = rollup_data.exact(mix)["first_pick_agreement"]
    assert total["count"] == want_count and total["value"] == pytest.approx(want_value)


def test_it_computes_the_swap_rate_by_default_model(alice, mix):
    _approx(totals(metric(alice, "swap_rate")), rollup_data.exact(mix)["swap_rate"])


def test_it_computes_the_ladder_fallback_rate_by_seat_model(alice, mix):
    _approx(
        totals(metric(alice, "ladder_fallback_rate")),
        rollup_data.exact(mix)["ladder_fallback_rate"],
    )


def test_it_splits_the_ladder_fallback_rate_by_what_the_seat_last_came_to(alice, mix):
    exact = rollup_data.exact(mix)["ladder_fallback_rate_by_cause"]
    assert sum(rate > 0 for rate, _ in exact.values()) >= 4  # the mix has most causes
    _approx(totals(metric(alice, "ladder_fallback_rate", group_by="reason")), exact)


def test_it_counts_the_verdict_mix_by_model(alice, mix):
    got = {tuple(t["group"].values()): t["value"] for t in metric(alice, "verdicts")["totals"]}
    assert got == rollup_data.exact(mix)["verdicts"]


def test_it_counts_provider_errors_by_provider_model_and_error(alice, mix):
    body = metric(alice, "provider_errors")
    got = {
        (t["group"]["provider"], t["group"]["model"], t["group"]["error"]): t["value"]
        for t in body["totals"]
    }
    assert got == dict(rollup_data.exact(mix)["provider_errors"])


def test_it_computes_the_invented_tool_rate_by_decision_and_protocol(alice, mix):
    body = metric(alice, "invented_tool_rate")
    got = {
        (t["group"]["decision"], t["group"]["protocol"]): (t["value"], t["count"])
        for t in body["totals"]
    }
    _approx(got, rollup_data.exact(mix)["invented_tool_rate"])


def test_it_computes_model_call_latency_p95(alice, mix):
    body = metric(alice, "model_call_latency_p95")
    got = {t["group"]["model"]: (t["value"], t["count"]) for t in body["totals"]}
    _approx(got, rollup_data.exact(mix)["model_call_latency_p95"], rel=0.01)


def test_it_counts_records_by_kind_and_per_time_bucket(alice, mix):
    assert {k: v for k, (v, _) in totals(metric(alice, "records")).items()} == dict(
        rollup_data.exact(mix)["records"]
    )
    hourly = metric(alice, "records", interval="hour", group_by="agent")
    per_agent = {
        s["group"]["agent"]: sum(p["value"] for p in s["points"]) for s in hourly["series"]
    }
    want = {}
    for r in mix:
        want[r["agent"]] = want.get(r["agent"], 0) + 1
    assert per_agent == want
    assert all(len(s["points"]) == 3 for s in hourly["series"])  # three hours of data
    minutes = metric(alice, "records", interval="minute")
    assert sum(p["value"] for s in minutes["series"] for p in s["points"]) == len(mix)


def test_it_filters_metrics_by_agent_and_model(alice, mix):
    body = metric(alice, "swap_rate", agent="support-bot", model="gpt-5")
    assert [t["group"] for t in body["totals"]] == [{"model": "gpt-5"}]
    mine = [
        r
        for r in mix
        if r["kind"] == "model_selection"
        and r["agent"] == "support-bot"
        and r["data"]["default_model"] == "gpt-5"
    ]
    assert body["totals"][0]["count"] == len(mine)


def test_it_keeps_streaks_per_model_in_ts_order(alice, mix):
    response = alice.client(alice.read_key).get("/api/v1/streaks")
    got = {s["model"]: s for s in response.json()["results"]}
    want = rollup_data.exact_streaks(mix)
    assert set(got) == set(want)
    for model, s in want.items():
        assert (got[model]["current"], got[model]["longest"]) == (s["current"], s["longest"])
        broken = got[model]["last_broken_at"]
        assert (broken and datetime.fromisoformat(broken.replace("Z", "+00:00"))) == (
            s["last_broken_at"]
            and datetime.fromisoformat(s["last_broken_at"].replace("Z", "+00:00"))
        )


def test_it_summarises_runs(alice, mix):
    run = Run.objects.get(project=alice.project, run_id="run-3")
    mine = [r for r in mix if r["run_id"] == "run-3"]
    assert sum(run.kind_counts.values()) == len(mine) == run.record_count
    assert run.has_swap == any(
        r["kind"] == "model_selection" and r["data"]["selected_model"] != r["data"]["default_model"]
        for r in mine
    )
    assert run.has_contract_break == any(
        r["kind"] == "classifier.verdict" and r["data"]["outcome"] == "parse_error" for r in mine
    )
    assert run.has_error  # every run in the mix has provider errors or pick errors


def test_two_passes_equal_one(alice):
    ingest(alice, rollup_data.build(400, seed=5))
    catchup.catch_up()
    once = rollup_snapshot(alice.project)
    assert catchup.catch_up() == 0
    assert rollup_snapshot(alice.project) == once


def test_a_pass_interrupted_half_way_leaves_nothing_behind(alice, monkeypatch):
    ingest(alice, rollup_data.build(400, seed=6))
    catchup.catch_up()
    clean = rollup_snapshot(alice.project)
    start = forget_rollups(alice.project)

    def killed(*args, **kwargs):
        raise RuntimeError("worker killed")

    monkeypatch.setattr(passes, "merge_streaks", killed)
    with pytest.raises(RuntimeError):
        catchup.run_pass(250)  # dies after writing its rollups
    assert Watermark.objects.get(name=catchup.WATERMARK).last_id == start
    assert not Rollup.objects.exists()
    monkeypatch.undo()
    catchup.catch_up(batch_size=250)
    assert rollup_snapshot(alice.project) == clean


def test_a_worker_killed_in_the_middle_of_a_pass_leaves_nothing_behind(
    transactional_db, postgres, alice, bob, tmp_path
):
    """A real kill: a catch-up process is SIGKILLed with its pass's transaction open, after it
    wrote the rollups and streak segments (run_pass's order) and while it waits on a run row
    this test holds. Nothing of it may remain, and the next pass must give the clean result."""
    records = rollup_data.build(400, seed=6)
    ingest(alice, records)
    catchup.catch_up()
    clean = rollup_snapshot(alice.project)
    ingest(bob, records)
    before = Watermark.objects.get(name=catchup.WATERMARK).last_id
    url = database_url()
    with psycopg.connect(url) as holder, psycopg.connect(url, autocommit=True) as watcher:
        holder.execute(
            "SELECT id FROM records_run WHERE project_id = %s ORDER BY run_id LIMIT 1 FOR UPDATE",
            [bob.project.pk],
        )
        env = dict(os.environ, DATABASE_URL=url, DECISIONBOARD_VAR_DIR=str(tmp_path))
        code = "from records.catchup import catch_up; catch_up()"
        with open(tmp_path / "pass.log", "w") as log:
            worker = processes.spawn([sys.executable, "manage.py", "shell", "-c", code], env=env,
                                     log=log)  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while True:
                waiting = watcher.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' AND query ILIKE '%%UPDATE records_run AS r%%'"
                ).fetchone()
                if waiting:
                    break
                assert worker.poll() is None, (tmp_path / "pass.log").read_text()
                assert time.monotonic() < deadline, "the pass never reached the run summaries"
                time.sleep(0.1)
        finally:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
        holder.rollback()
        # PostgreSQL rolls the dead client's transaction back when it notices the socket close.
        deadline = time.monotonic() + 30
        while watcher.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", waiting).fetchone():
            assert time.monotonic() < deadline, "the killed pass's backend stayed"
            time.sleep(0.1)
    assert Watermark.objects.get(name=catchup.WATERMARK).last_id == before
    assert not Rollup.objects.filter(project=bob.project).exists()
    assert not StreakSegment.objects.filter(project=bob.project).exists()
    catchup.catch_up()
    assert rollup_snapshot(bob.project) == clean


def test_out_of_order_arrival_gives_the_same_metrics_and_streaks(alice, bob):
    records = rollup_data.build(600, seed=8)
    ingest(alice, records)
    catchup.catch_up()
    shuffled = records[:]
    random.Random(1).shuffle(shuffled)
    # Arrive shuffled and in several passes, so later passes bring verdicts from the past.
    for start in range(0, len(shuffled), 150):
        ingest(bob, shuffled[start : start + 150])
        catchup.catch_up()
    assert rollup_snapshot(bob.project) == rollup_snapshot(alice.project)


def test_each_folded_run_counts_once_in_the_buckets_of_its_last_record(alice):
    """keys.RUN_LAST: after passes that bring a run's records in any order, each run is counted
    once per grain, in the bucket of its last record; the buckets it left hold no row."""
    records = rollup_data.build(600, seed=9)
    # One run whose last record arrives after it was counted, in a later minute, hour and day.
    records += [record(run_id="late", ts="2026-11-20T23:59:30Z")]
    late_end = record(run_id="late", ts="2026-11-21T00:00:10Z")
    random.Random(2).shuffle(records)
    for start in range(0, len(records), 100):
        ingest(alice, records[start : start + 100])
        catchup.catch_up()
    ingest(alice, [late_end])
    catchup.catch_up()
    stored = Rollup.objects.filter(project=alice.project, kind=RUN_LAST)
    for grain in Grain:
        got = {(r.bucket, r.agent): r.count for r in stored.filter(grain=grain)}
        want = Counter(
            (truncate(run.last_ts, grain), run.agent or "")
            for run in Run.objects.filter(project=alice.project)
        )
        # (the late run's first minute, hour and day held it alone: no row is left there)
        assert got == dict(want), grain


def test_a_late_record_lands_in_its_own_bucket(alice):
    ingest(alice, [record(ts="2026-11-20T09:30:00Z")])
    catchup.catch_up()
    ingest(alice, [record(ts="2026-11-20T08:10:00Z")])
    catchup.catch_up()
    body = metric(alice, "records", interval="hour")
    assert [(p["t"], p["value"]) for p in body["series"][0]["points"]] == [
        ("2026-11-20T08:00:00Z", 1),
        ("2026-11-20T09:00:00Z", 1),
    ]


def test_it_reports_freshness_with_every_metric(alice):
    ingest(alice, [record(), record()])
    body = metric(alice, "records")
    assert body["freshness"]["pending"] is True and body["freshness"]["lag_seconds"] >= 0
    catchup.catch_up()
    body = metric(alice, "records")
    assert body["freshness"]["pending"] is False and body["freshness"]["lag_seconds"] == 0


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"interval": "week"}, "interval"),
        ({"group_by": "reason"}, "group_by"),
        ({"from": "yesterday"}, "from"),
        ({"to": "2026-11-19T00:00:00Z"}, "to"),
        ({"run_id": "r1"}, "run_id"),
        ({"interval": "minute", "from": "2000-01-01T00:00:00Z"}, "interval"),
    ],
)
def test_it_names_the_parameter_of_a_bad_metric_request(alice, params, param):
    response = alice.client(alice.read_key).get("/api/v1/metrics/swap_rate", {**RANGE, **params})
    assert response.status_code == 400
    assert param in response.json()


def test_it_answers_400_for_an_unknown_metric(alice):
    response = alice.client(alice.read_key).get("/api/v1/metrics/happiness")
    assert response.status_code == 400 and "metric" in response.json()


def test_another_projects_key_sees_nothing(alice, bob, mix):
    body = bob.client(bob.read_key).get("/api/v1/metrics/records", RANGE).json()
    assert body["series"] == [] and body["totals"] == []
    assert bob.client(bob.read_key).get("/api/v1/streaks").json()["results"] == []
    assert (
        bob.client(bob.read_key)
        .get("/api/v1/metrics/records", {**RANGE, "project": "acme"})
        .status_code
        == 404
    )


def test_an_ingest_key_cannot_read_metrics(alice):
    assert alice.client().get("/api/v1/metrics/records").status_code == 403


def test_an_operator_reads_the_metrics_of_their_project(alice, mix, django_user_model, client):
    from records.models import Membership

    user = django_user_model.objects.create_user("olivia", password="pw-olivia-123")
    client.force_login(user)
    assert client.get("/api/v1/metrics/records", RANGE).status_code == 403  # no project yet
    Membership.objects.create(user=user, project=alice.project)
    body = client.get("/api/v1/metrics/records", RANGE).json()
    assert sum(t["value"] for t in body["totals"]) == len(mix)
    assert client.get("/api/v1/metrics/records", {**RANGE, "project": "globex"}).status_code == 404


def test_it_reads_metrics_in_a_bounded_number_of_queries(alice, mix, django_assert_max_num_queries):
    client = alice.client(alice.read_key)
    with django_assert_max_num_queries(8):
        client.get("/api/v1/metrics/classifier_latency_p95", RANGE)
    with django_assert_max_num_queries(8):
        client.get("/api/v1/streaks")


def test_the_catch_up_keeps_its_tables_analysed_as_they_grow(postgres, alice):
    """Statistics are missing after a bulk load when autovacuum is off (or behind a burst):
    the catch-up analyses the record partitions it grew past the threshold (not the others,
    not the parent, without statistics on the JSON bodies), and not on every pass."""

    def leaves() -> dict[str, float]:
        with postgres.cursor() as cursor:
            cursor.execute(
                "SELECT c.relname, c.reltuples FROM pg_inherits i "
                "JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = 'records_record'::regclass"
            )
            return dict(cursor.fetchall())

    def json_statistics(table: str) -> list[int]:
        with postgres.cursor() as cursor:
            cursor.execute(
                "SELECT attstattarget FROM pg_attribute WHERE attrelid = %s::regclass "
                "AND attname IN ('data', 'derived')",
                [table],
            )
            return sorted(target for (target,) in cursor.fetchall())

    records = rollup_data.build(600, seed=2)
    ingest(alice, records)
    catchup.catch_up()
    holding = {
        f"records_record_p{day:%Y%m%d}"
        for day in Record.objects.filter(project=alice.project).dates("ts", "day")
    }
    # A partition holding none of them that nothing changed since its last ANALYZE (other
    # tests commit records to some): the catch-up leaves it alone.
    with postgres.cursor() as cursor:
        cursor.execute(
            "SELECT relname FROM pg_stat_user_tables WHERE relname = ANY(%s) "
            "AND n_mod_since_analyze = 0 ORDER BY relname",
            [sorted(set(leaves()) - holding)],
        )
        untouched = cursor.fetchone()[0]
    # As if the last ANALYZE was just before these 600 (ids do not restart between tests).
    first = (
        Record.objects.filter(project=alice.project).order_by("id").values_list("id", flat=True)[0]
    )
    Watermark.objects.update_or_create(name="analyzed", defaults={"last_id": first - 1})
    # As if the planner knew nothing of the other partitions (an earlier test's ANALYZE may have
    # committed sizes that would raise the threshold), and something made up of the untouched
    # one; the test's transaction rolls this back.
    with postgres.cursor() as cursor:
        cursor.execute(
            "UPDATE pg_class SET reltuples = -1 WHERE relname = ANY(%s)",
            [sorted(set(leaves()) - {untouched})],
        )
        cursor.execute("UPDATE pg_class SET reltuples = 7 WHERE relname = %s", [untouched])
        cursor.execute("UPDATE pg_class SET reltuples = -1 WHERE relname = 'records_record'")
    assert not catchup.analyze_if_grown()  # 600 records: under the default threshold
    assert catchup.analyze_if_grown(min_records=500)
    estimated = leaves()
    # Analysed: the planner now knows how many rows each holds (every one of them is in a
    # partition holding alice's; other tests' rows may be there too).
    assert sum(estimated[name] for name in holding) >= len(records)
    assert estimated[untouched] == 7  # not grown: not analysed
    assert all(json_statistics(name) == [0, 0] for name in holding)
    with postgres.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE relname = 'records_record'")
        assert cursor.fetchone()[0] == -1  # the parent is never analysed
        # Coarse statistics (a sample of 300 x the target): a histogram of the 600 records'
        # times in at most target + 1 bounds, where the server's default (100) gives 101.
        cursor.execute(
            "SELECT max(array_length(histogram_bounds, 1)) FROM pg_stats "
            "WHERE tablename = ANY(%s) AND attname = 'ts'",
            [sorted(holding)],
        )
        assert cursor.fetchone()[0] == catchup.ANALYZE_STATISTICS_TARGET + 1
        cursor.execute("SHOW default_statistics_target")
        assert cursor.fetchone()[0] == "100"  # set for the catch-up's ANALYZE only
    assert not catchup.analyze_if_grown(min_records=500)  # nothing grew since


def test_the_streak_recompute_reads_the_verdict_indexes_without_statistics(postgres, alice):
    """A late verdict's minute is recomputed from its parse errors, each probing the verdicts
    around it: on partitions with no statistics (autovacuum off, nothing analysed) the plan
    reads no table whole and runs one range of parse errors a minute and a probe or two a parse
    error and two a minute, never one a verdict (migrations 0019, 0024)."""

    records = rollup_data.build(600, seed=2)
    ingest(alice, records)
    catchup.catch_up()
    verdicts = Record.objects.filter(project=alice.project, kind="classifier.verdict")
    keys = sorted({(m, truncate(ts, "minute")) for m, ts in verdicts.values_list("model", "ts")})
    broken = verdicts.filter(outcome="parse_error").count()
    assert len(keys) > 3 and broken > 3
    with postgres.cursor() as cursor:
        # Records of other kinds in the same seconds, 40 of each, so that the partitions weigh
        # what a production day's do: in a table of a few pages any index costs about the same
        # to the planner, and it may read all of a minute's records along record_ts.
        cursor.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_name = 'records_record' AND column_name NOT IN ('id', 'record_key')"
        )
        columns = ", ".join(name for (name,) in cursor.fetchall())
        cursor.execute(
            f"INSERT INTO records_record (record_key, {columns}) "
            f"SELECT r.record_key || '-copy-' || g, {columns} FROM records_record r "
            "CROSS JOIN generate_series(1, 40) AS g "
            "WHERE r.project_id = %s AND r.kind <> 'classifier.verdict'",
            [alice.project.id],
        )
        # Forget what any earlier ANALYZE found (the test's transaction rolls this back).
        cursor.execute(
            "DELETE FROM pg_statistic WHERE starelid IN (SELECT inhrelid FROM pg_inherits "
            "WHERE inhparent = 'records_record'::regclass)"
        )
        cursor.execute(
            "UPDATE pg_class SET reltuples = -1 WHERE oid IN (SELECT inhrelid FROM pg_inherits "
            "WHERE inhparent = 'records_record'::regclass)"
        )
        # And their indexes' counts, as a partition never analysed has them: what earlier tests
        # left there (counts from an ANALYZE, pages since emptied) is no state of production's.
        cursor.execute(
            "UPDATE pg_class SET reltuples = -1, relpages = 0 WHERE oid IN (SELECT x.indexrelid "
            "FROM pg_index x JOIN pg_inherits h ON h.inhrelid = x.indrelid "
            "WHERE h.inhparent = 'records_record'::regclass)"
        )
        indexes = {}
        for name in ("record_verdict_model_ts", "record_broken_ts"):
            cursor.execute(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = %s::regclass",
                [name],
            )
            indexes[name] = {relname for (relname,) in cursor.fetchall()}
        # The query the recompute runs on PostgreSQL, run: each scan's loops are counted.
        params = {"project": alice.project.id, "last_id": 10**12,
                  "models": [m for m, _ in keys], "minutes": [b for _, b in keys]}  # fmt: skip
        nodes = plan_nodes(cursor, streak_fold.SEGMENTS_SQL, params, analyze=True)
        # For a failure's message: the data's partitions and their indexes, valid or not.
        cursor.execute(
            "SELECT c.relname, i.relname, x.indisvalid, i.reltuples, i.relpages "
            "FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid "
            "JOIN pg_index x ON x.indrelid = c.oid JOIN pg_class i ON i.oid = x.indexrelid "
            "WHERE h.inhparent = 'records_record'::regclass AND c.relname = ANY(%s) ORDER BY 1, 2",
            [sorted({f"records_record_p{b:%Y%m%d}" for _, b in keys})],
        )
        partitions_indexes = cursor.fetchall()
    read_whole = scans_of(nodes, "Seq Scan")
    assert not read_whole, (read_whole, partitions_indexes)
    scans = [(node["Index Name"], node["Actual Loops"]) for node in scans_of(nodes, "Index Scan")]
    assert scans, nodes
    # One range of parse errors a minute, and a probe or two a parse error and two a minute:
    # never a read per verdict.
    assert sum(n for _, n in scans) <= len(keys) + 2 * broken + 2 * len(keys), nodes
    # Along which indexes: record_broken_ts and record_verdict_model_ts, here and on the
    # soak's databases. The planner may instead read the test's partition along record_ts,
    # every kind's records of each minute filtered, depending on statistics left by the tests
    # before this one; so the names are reported rather than asserted.
    read = {name for name, _ in scans}
    named = indexes["record_verdict_model_ts"] | indexes["record_broken_ts"]
    if not read <= named:
        print("the streak recompute read other indexes:", sorted(read - named), nodes)


def test_the_streak_recompute_runs_without_parallel_workers(postgres, alice):
    """The recompute is background work: its query runs with no parallel workers, which took
    both cores of a 2-core machine from pages and ingest for seconds at a time."""
    from tests.support.factories import BASE_TS

    def verdict(i: int, second: int) -> dict:
        ts = (BASE_TS + timedelta(seconds=second)).isoformat()
        return record("classifier.verdict", id=f"v{i}", ts=ts,
                      data={"outcome": "parse_error", "model": "m", "seatModel": "m"})  # fmt: skip

    ingest(alice, [verdict(0, 30)])
    catchup.catch_up()
    seen = []

    def showing_the_setting(execute, sql, params, many, context):
        if sql == streak_fold.SEGMENTS_SQL:
            context["cursor"].cursor.execute("SHOW max_parallel_workers_per_gather")
            seen.append(context["cursor"].cursor.fetchone()[0])
        return execute(sql, params, many, context)

    ingest(alice, [verdict(1, 10)])  # late within its minute: the minute is recomputed
    with postgres.execute_wrapper(showing_the_setting):
        catchup.catch_up()
    assert seen == ["0"]
    assert Streak.objects.get(project=alice.project, model="m").current == 2


def _rollup_table_stats(cursor, *columns: str) -> tuple[int, ...]:
    """These pg_stat_user_tables counters of the rollup table, this connection's counts
    flushed."""
    cursor.execute("SELECT pg_stat_force_next_flush()")
    cursor.execute(
        f"SELECT {', '.join(columns)} FROM pg_stat_user_tables WHERE relname = %s",
        [Rollup._meta.db_table],
    )
    return cursor.fetchone()


def _minute_rollups(name: str, **fields) -> Project:
    """A project with 2,000 minute rollup rows of `fields`, three days ago onwards."""
    project = Project.objects.create(name=name)
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(days=3)
    Rollup.objects.bulk_create(
        Rollup(
            project=project,
            grain="minute",
            bucket=start + timedelta(minutes=i),
            kind="turn",
            **fields,
        )  # fmt: skip
        for i in range(2_000)
    )
    return project


def test_the_catch_up_vacuums_the_tables_its_passes_update(transactional_db, postgres):
    """Updated rows leave dead versions that every index scan visits until a VACUUM; with
    autovacuum off (or a minute away) the catch-up vacuums its own tables once they pass
    autovacuum's rule (records.catchup.housekeeping.vacuum_if_churned)."""
    from django.db.models import F

    project = _minute_rollups("churn")
    # 6,000 dead versions behind 2,000 live rows. Each update moves the row's bucket, an indexed
    # column, so none is HOT: a HOT update's old version can be pruned as the page is read,
    # which takes it off the dead count before any VACUUM (migration 0016 makes most HOT).
    for _ in range(3):
        Rollup.objects.filter(project=project).update(bucket=F("bucket") + timedelta(days=3))
    with postgres.cursor() as cursor:
        dead, vacuums = _rollup_table_stats(cursor, "n_dead_tup", "vacuum_count")
        assert dead >= 6_000
        assert Rollup._meta.db_table not in catchup.vacuum_if_churned(min_dead=dead + 1)
        catchup.catch_up()  # nothing to fold; it vacuums what churned
        after, vacuumed = _rollup_table_stats(cursor, "n_dead_tup", "vacuum_count")
    assert vacuumed == vacuums + 1
    assert after < 100
    assert Rollup._meta.db_table not in catchup.vacuum_if_churned()  # nothing since


def test_a_rollup_row_updated_in_place_writes_no_index_entry(transactional_db, postgres):
    """Rollup pages keep room for the next version of their rows (migration 0016): an update
    that finds room stays on its page (HOT), so the rollup indexes do not grow with every pass.
    Here every row of freshly filled pages is updated at once, the worst case: the room holds
    half of them (none with full pages); a pass finds its pages pruned of the versions before."""
    from django.db.models import F

    project = _minute_rollups("hot", sketch={str(b): 1 for b in range(40)})
    with postgres.cursor() as cursor:
        before = _rollup_table_stats(cursor, "n_tup_upd", "n_tup_hot_upd")
        Rollup.objects.filter(project=project).update(count=F("count") + 1)
        after = _rollup_table_stats(cursor, "n_tup_upd", "n_tup_hot_upd")
    updates, hot = (a - b for a, b in zip(after, before, strict=True))
    assert updates == 2_000
    assert hot >= 0.4 * updates, (updates, hot)


def test_a_gap_of_a_million_ids_costs_one_pass_not_one_a_window(alice):
    """Ids nothing holds (a rolled-back batch's, records past retention) between two records:
    after an empty window the lane goes on from the next record."""
    catchup.catch_up()
    ingest(alice, [record("turn", id="before-the-gap")])
    (first,) = Record.objects.filter(project=alice.project).values_list("id", flat=True)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO records_record (id, project_id, record_key, kind, run_id, ts, "
            "received_at, is_swap, is_fallback, is_error, is_contract_break, rollup_key, "
            "has_violation, data, derived) SELECT id + 1000000, project_id, 'after-the-gap', "
            "kind, run_id, ts, received_at, is_swap, is_fallback, is_error, is_contract_break, "
            "rollup_key, has_violation, data, derived FROM records_record WHERE id = %s",
            [first],
        )
    results = []
    while not results or not results[-1].caught_up:
        results.append(catchup.run_pass(100))
        # Each record at most one empty pass after the one before (other tests' ids between
        # the watermark and the first): never a pass for each window of the gap.
        assert len(results) <= 4, results
    assert sum(result.records for result in results) == 2
    assert results[-1].last_id == first + 1_000_000


def test_a_pass_read_in_chunks_equals_small_passes(alice, monkeypatch):
    """A pass streams its records in chunks (records.catchup.reads.fetch_records): one large pass
    over many chunks gives what many small passes give."""
    records = rollup_data.build(700, seed=11)
    ingest(alice, records)
    # From just before the project's first record: passes of 50 ids from 0 would have to walk
    # every id that earlier tests used up (ids don't restart), within the catch-up's 50 s.
    forget_rollups(alice.project)
    assert catchup.catch_up(batch_size=50) == len(records)
    small = rollup_snapshot(alice.project)
    forget_rollups(alice.project)
    monkeypatch.setattr(reads, "CHUNK", 64)  # 700 and more records: a dozen chunks, one pass
    assert catchup.catch_up(batch_size=10_000) == len(records)
    assert rollup_snapshot(alice.project) == small


def test_the_catch_up_loads_timestamps_as_django_does(postgres):
    """The store backend's fast_timestamps swaps Django's Python timestamptz loader for
    psycopg's C one: the same aware datetimes, tzinfo included, to the microsecond."""
    sql = (
        "SELECT t FROM (VALUES ('2026-11-20 23:59:59.999999+00'::timestamptz), "
        "('2026-03-29 01:30:00.000001+02'), ('1999-12-31 12:00:00-11:30'), (NULL)) v(t)"
    )
    with postgres.cursor() as cursor:
        cursor.execute(sql)
        django_loaded = cursor.fetchall()
    with postgres.cursor() as cursor:
        BACKENDS["postgresql"].fast_timestamps(cursor)
        cursor.execute(sql)
        fast = cursor.fetchall()
        assert cursor.cursor.adapters.get_loader(1184, 0).__module__.startswith("psycopg_binary")
    assert fast == django_loaded
    assert [repr(t.tzinfo) for (t,) in fast if t] == [repr(t.tzinfo) for (t,) in django_loaded if t]


def _readers_alive() -> list:
    import threading

    return [t for t in threading.enumerate() if t.name == "catch-up read-ahead"]


def test_a_fold_that_fails_mid_read_leaves_nothing_behind_and_no_reader(alice, monkeypatch):
    """The pass's rows are read ahead by a thread (the PostgreSQL backend's read_ahead): a fold that
    fails half way through them stops it before the transaction rolls back, and the next
    pass, on the same connection, folds everything as if nothing had happened."""
    ingest(alice, rollup_data.build(700, seed=12))
    catchup.catch_up()
    clean = rollup_snapshot(alice.project)
    start = forget_rollups(alice.project)
    monkeypatch.setattr(reads, "CHUNK", 64)
    folded = 0
    add = batch.Batch.add

    def dies_half_way(self, row):
        nonlocal folded
        folded += 1
        if folded == 300:
            raise RuntimeError("worker killed")
        add(self, row)

    monkeypatch.setattr(batch.Batch, "add", dies_half_way)
    with pytest.raises(RuntimeError):
        catchup.run_pass(10_000)
    assert _readers_alive() == []
    assert Watermark.objects.get(name=catchup.WATERMARK).last_id == start
    assert not Rollup.objects.exists()
    monkeypatch.setattr(batch.Batch, "add", add)
    catchup.catch_up(batch_size=10_000)
    assert rollup_snapshot(alice.project) == clean
    assert _readers_alive() == []


def test_a_database_error_while_reading_ahead_is_raised_as_djangos(postgres):
    """An outage while the thread reads reaches the pass as Django's error, the one the
    catch-up task retries (config.outage.DATABASE_UNAVAILABLE)."""
    from django.db import OperationalError

    chunks = iter([[(1,)], psycopg.OperationalError("server closed the connection")])

    def fetch(size):
        chunk = next(chunks)
        if isinstance(chunk, Exception):
            raise chunk
        return chunk

    read = read_ahead(fetch, 10)
    assert next(read) == [(1,)]
    with pytest.raises(OperationalError, match="server closed"):
        next(read)
    assert _readers_alive() == []


def _verdict(ts: str, outcome: str) -> dict:
    data = {"outcome": outcome, "toolCallId": f"call-{ts}"}
    if outcome == "parse_error":
        data["form"] = "missing"
    out = record("classifier.verdict", ts=ts, data=data)
    if outcome == "parse_error":
        del out["data"]["verdict"]
    return out


def test_late_verdicts_count_in_the_streak_once_the_workers_settle_interval_passed(alice):
    """The workers recompute a minute a late verdict fell inside at most every
    STREAK_SETTLE_SECONDS; until then the streaks API says how many minutes wait."""
    from workers.tasks import catch_up_task

    def streak():
        body = alice.client(alice.read_key).get("/api/v1/streaks").json()
        (only,) = body["results"]
        return only["current"], only["longest"], body["streaks"]["dirty_minutes"]

    ingest(alice, [_verdict("2026-11-20T09:00:10Z", "parse_error"),
                   _verdict("2026-11-20T09:00:30Z", "parse_error")])  # fmt: skip
    catch_up_task.apply()
    assert streak() == (2, 2, 0)
    # A ruling inside the minute: the lane has not recomputed a minute yet, so it does at once.
    ingest(alice, [_verdict("2026-11-20T09:00:20Z", "ruled")])
    catch_up_task.apply()
    assert streak() == (1, 1, 0)
    # Another late verdict within the interval waits, and the API says so.
    ingest(alice, [_verdict("2026-11-20T09:00:15Z", "parse_error")])
    catch_up_task.apply()
    assert streak() == (1, 1, 1)
    assert StreakSegment.objects.filter(dirty=True).count() == 1
    # Once the interval has passed since the lane's last recompute, the next call counts it.
    Watermark.objects.filter(name=catchup.streaks_folded_name(0, 1)).update(
        last_pass_at=timezone.now() - timedelta(seconds=catchup.STREAK_SETTLE_SECONDS + 1)
    )
    catch_up_task.apply()
    assert streak() == (1, 2, 0)
    # A direct catch-up (management commands, tests) always recomputes.
    ingest(alice, [_verdict("2026-11-20T09:00:12Z", "ruled")])
    catchup.catch_up()
    assert streak() == (1, 1, 0)


def test_a_long_recompute_of_late_minutes_waits_in_proportion_before_the_next(alice):
    """The recompute reads every verdict of the late minutes: after one that took T seconds the
    workers wait STREAK_COST_SHARE x T (when that is past the settle interval) before the next,
    so that a backlog of late verdicts slows the streaks, never the rollups."""
    from workers.tasks import catch_up_task

    ingest(alice, [_verdict("2026-11-20T09:00:10Z", "parse_error"),
                   _verdict("2026-11-20T09:00:30Z", "parse_error")])  # fmt: skip
    catch_up_task.apply()
    ingest(alice, [_verdict("2026-11-20T09:00:20Z", "ruled")])
    catch_up_task.apply()  # recomputed at once (the lane's first), and timed
    folded = Watermark.objects.get(name=catchup.streaks_folded_name(0, 1))
    assert folded.last_id >= 0 and folded.last_pass_at is not None
    # As if that recompute had taken 5 s and ended 15 s ago: past the settle interval (10 s),
    # not past 4 x 5 s.
    Watermark.objects.filter(pk=folded.pk).update(
        last_id=5_000, last_pass_at=timezone.now() - timedelta(seconds=15)
    )
    ingest(alice, [_verdict("2026-11-20T09:00:15Z", "parse_error")])
    catch_up_task.apply()
    assert StreakSegment.objects.filter(dirty=True).count() == 1
    Watermark.objects.filter(pk=folded.pk).update(
        last_pass_at=timezone.now() - timedelta(seconds=catchup.STREAK_COST_SHARE * 5 + 1)
    )
    catch_up_task.apply()
    assert StreakSegment.objects.filter(dirty=True).count() == 0
    assert Streak.objects.get(project=alice.project).longest == 2


def test_passes_go_on_while_late_streak_minutes_are_recomputed(transactional_db, postgres):
    """The recompute reads the late minutes' verdicts without the lane's lock: a pass runs
    meanwhile, and a minute it brings another late verdict stays dirty for the next recompute
    instead of being stored without it."""
    import threading

    from django.db import connection

    alice = Persona("acme")
    sent = [_verdict("2026-11-20T09:00:10Z", "parse_error"),
            _verdict("2026-11-20T09:00:30Z", "parse_error")]  # fmt: skip
    ingest(alice, sent)
    catchup.catch_up()
    sent.append(_verdict("2026-11-20T09:00:20Z", "ruled"))  # late: its minute is dirty
    ingest(alice, sent[-1:])
    catchup.run_pass(1000)
    assert StreakSegment.objects.filter(dirty=True).count() == 1
    meanwhile = [
        _verdict("2026-11-20T09:00:15Z", "parse_error"),  # into the minute being read
        _verdict("2026-11-20T09:01:05Z", "parse_error"),  # a minute extended at its end
    ]
    passed = []

    def pass_meanwhile():
        try:
            ingest(alice, meanwhile)
            passed.append(catchup.run_pass(1000).records)
        finally:
            connection.close()

    read = streak_fold.dirty_segments

    def read_then_pass(keys, last_id):
        minutes = read(keys, last_id)
        other = threading.Thread(target=pass_meanwhile)
        other.start()
        other.join(timeout=20)
        assert not other.is_alive(), "the pass waited for the recompute"
        return minutes

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(streak_fold, "dirty_segments", read_then_pass)
        assert catchup.fold_dirty_streaks() == 0  # its one minute was marked again meanwhile
    assert passed == [2]
    dirty = StreakSegment.objects.get(dirty=True)
    assert (dirty.bucket.minute, dirty.dirty_upto) == (0, catchup.folded_upto())
    assert catchup.fold_dirty_streaks() == 1
    assert not StreakSegment.objects.filter(dirty=True).exists()
    # In ts order: broken :10, broken :15, ruled :20, broken :30, broken 09:01:05. Stored
    # without the :15 verdict, the longest would stay 1.
    streak = Streak.objects.get(project=alice.project)
    assert (streak.current, streak.longest) == (2, 2)


def test_recomputed_minutes_equal_their_verdicts_folded_in_order(alice):
    """Late verdicts with equal timestamps, keys of mixed case and every verdict class, in
    shuffled batches: each minute's stored segment and each model's streak equal
    records.contract.streak_segments.of_verdicts over the verdicts in (ts, key) code point order.
    (On
    PostgreSQL the recompute computes the segments in SQL; on SQLite in Python.)"""
    from records.contract import streak_segments
    from tests.support.factories import BASE_TS

    rng = random.Random(7)
    sent, folded = [], {}
    for i in range(600):
        model = rng.choice(["model-a", "model-b"])
        ts = BASE_TS + timedelta(seconds=rng.randrange(180), milliseconds=rng.choice([0, 0, 500]))
        outcome = rng.choice(["ruled", "ruled", "parse_error", "parse_error", "unavailable"])
        data = {"outcome": outcome, "model": model, "seatModel": model, "toolCallId": f"c{i}"}
        if outcome == "ruled":
            data["verdict"] = verdict_class = rng.choice(["allow", "block"])
        else:
            verdict_class = outcome
        out = record("classifier.verdict", ts=ts.isoformat(), data=data)
        out["id"] = f"{rng.choice('aBzZ_')}{i}"
        if outcome != "ruled":
            del out["data"]["verdict"]
        sent.append(out)
        folded.setdefault(model, []).append((verdict_class, ts, out["id"]))
    for i in range(0, 600, 150):
        ingest(alice, sent[i : i + 150])
        catchup.catch_up()
    assert not StreakSegment.objects.filter(dirty=True).exists()
    for model, verdicts in folded.items():
        verdicts.sort(key=lambda v: (v[1], v[2]))
        for minute in range(3):
            start = BASE_TS + timedelta(minutes=minute)
            want = streak_segments.of_verdicts(
                v for v in verdicts if start <= v[1] < start + timedelta(minutes=1)
            )
            stored = StreakSegment.objects.get(model=model, grain="minute", bucket=start)
            assert streak_fold.stored_segment(stored) == want, (model, minute)
        whole = streak_segments.of_verdicts(verdicts)
        streak = Streak.objects.get(project=alice.project, model=model)
        assert (streak.current, streak.longest, streak.last_broken_at) == (
            whole.current, whole.longest, whole.last_broken_at
        )  # fmt: skip


@pytest.mark.parametrize("analysed", [False, True])
def test_a_read_of_one_kind_walks_that_kinds_rollups_only(postgres, alice, analysed):
    """The metrics API's read of a latency over a day of minutes reads that kind's rows along
    rollup_kind_bucket, with or without statistics, not every kind's rows of the range: on
    bench/pages.py's million records a parallel scan of the table (93 ms, three processes)
    before migration 0021, an index range (20 ms) after."""

    from django.test.utils import CaptureQueriesContext

    from records.contract.rollup_keys import PICK_LATENCY
    from records.metrics import reader

    start = timezone.now().replace(second=0, microsecond=0) - timedelta(days=1)
    kinds = [PICK_LATENCY, *(f"kind{k}" for k in range(23))]
    with postgres.cursor() as cursor:
        # A day of minutes of 24 kinds, 6 agents each: 207,360 rows, one kind in 24 asked for.
        cursor.execute(
            f"INSERT INTO {Rollup._meta.db_table} (project_id, grain, bucket, kind, agent, "
            "model, key, count, tokens_in, tokens_out, latency_sum, sketch) "
            "SELECT %s, 'minute', %s + m * interval '1 minute', k, 'agent' || a, 'm', '', 1, 0, "
            "0, 0, '{\"100\": 1}' FROM generate_series(0, 1439) m, unnest(%s::text[]) k, "
            "generate_series(1, 6) a",
            [alice.project.id, start, kinds],
        )
        if analysed:
            cursor.execute(f"ANALYZE {Rollup._meta.db_table}")
        else:  # forget what an earlier ANALYZE found (the test's transaction rolls this back)
            cursor.execute(
                "DELETE FROM pg_statistic WHERE starelid = %s::regclass", [Rollup._meta.db_table]
            )
            cursor.execute(
                "UPDATE pg_class SET reltuples = -1 WHERE relname = %s", [Rollup._meta.db_table]
            )
    with CaptureQueriesContext(postgres) as queries:
        rows = reader.read(alice.project.id, "minute", start, start + timedelta(days=1),
                           kinds=(PICK_LATENCY,), sketch_kinds=(PICK_LATENCY,))  # fmt: skip
    assert len(rows) == 1440 * 6
    (query,) = [q["sql"] for q in queries.captured_queries if Rollup._meta.db_table in q["sql"]]
    with postgres.cursor() as cursor:
        nodes = plan_nodes(cursor, query)
    # An index scan, or a bitmap of it, whose range is the kind's, not a filter over the range.
    (scan,) = [node for node in nodes if node.get("Index Name") == "rollup_kind_bucket"]
    assert "'derived.pick_latency'" in scan["Index Cond"], nodes
    assert "Seq Scan" not in node_types(nodes), nodes


def test_a_pass_unpacks_each_record_row_in_the_order_it_reads_the_columns():
    """Batch.add unpacks a row of 25 values by position: its names must follow the columns the
    pass selects (FIELDS, then the JSON fields), on both databases."""
    columns = [column for column, _ in batch.ROW_NAMES]
    assert columns[: len(batch.FIELDS)] == list(batch.FIELDS)
    for store in BACKENDS.values():
        assert len(batch.ROW_NAMES) == len(batch.FIELDS) + len(batch.json_fields(store))
    unpacked = batch.Batch.add.__code__.co_varnames[2 : 2 + len(batch.ROW_NAMES)]
    assert unpacked == tuple(name for _, name in batch.ROW_NAMES)


def test_it_truncates_to_the_grains_the_rollups_store():
    # The contract's grains are plain strings, so that it reads no model: the same as Grain's.
    assert list(GRAINS) == list(Grain.values)
    ts = datetime(2026, 3, 4, 5, 6, 7, 8, tzinfo=UTC)
    assert [truncate(ts, grain) for grain in Grain] == [
        datetime(2026, 3, 4, 5, 6, tzinfo=UTC),
        datetime(2026, 3, 4, 5, tzinfo=UTC),
        datetime(2026, 3, 4, tzinfo=UTC),
    ]

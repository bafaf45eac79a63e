"""The whole product behind PgBouncer in transaction mode (DATABASE_POOLER=transaction).

Debian's PgBouncer, with a pool smaller than its clients, in front of a private PostgreSQL
cluster: consecutive transactions of one connection run on whichever server session is free,
so any session state the product kept (a session advisory lock, a SET, a cursor held across
transactions) would be lost or leak to another client. Ingest, the catch-up in two lanes, an
alert tick and an export job run through it; the rollups must be those of a run without it.
"""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
import requests

from tests.support import rollup_data
from tests.support.live import pgbouncer, private_cluster, run_export_job, wait_until
from tests.support.standby import (
    SNAPSHOT,
    manage,
    metric,
    post_records,
    product_env,
    reference,
    set_up,
    snapshot,
)
from workers import processes

PROJECTS = {"acme": rollup_data.build(500, seed=3), "globex": rollup_data.build(500, seed=5)}
ALERT_NOW = datetime(2026, 11, 20, 11, 0, tzinfo=UTC)  # inside the records' three hours
RULE = {
    "name": "pick errors",
    "metric": "pick_error_rate",
    "group_by": "model",
    "comparator": "gt",
    "threshold": 0.01,
    "window_minutes": 120,
    "min_records": 1,
    "for_minutes": 0,
    "no_data": "ok",
    "renotify_minutes": 60,
}


def test_ingest_catch_up_alerts_and_exports_behind_pgbouncer(transactional_db, postgres, tmp_path):
    want = reference(PROJECTS)
    with private_cluster() as cluster, pgbouncer(cluster, "decisionboard", pool_size=4) as url:
        env = product_env(
            url, tmp_path, DATABASE_POOLER="transaction", DECISIONBOARD_CATCHUP_LANES="2"
        )
        keys = dict(zip(PROJECTS, set_up(env, list(PROJECTS)), strict=True))
        # jit=off is the role's default now (no startup options through PgBouncer).
        assert cluster.execute("decisionboard", "SHOW jit") == [("off",)]

        port = processes.free_port()
        base = f"http://127.0.0.1:{port}"
        default, jobs = processes.worker_commands(tmp_path / "beat-schedule")
        with (
            processes.running(processes.web_command(f"127.0.0.1:{port}", 2), env=env,
                              log=tmp_path / "web.log"),
            processes.running(default, env=env, log=tmp_path / "default.log"),
            processes.running(jobs, env=env, log=tmp_path / "jobs.log"),
        ):  # fmt: skip
            wait_until(lambda: requests.get(f"{base}/accounts/login/", timeout=5).ok, 60, "web")
            for name, records in PROJECTS.items():
                post_records(base, keys[name], records, batch=100)

            def folded() -> bool:
                # Streak minutes a late verdict dirtied settle after the rollups
                # (records.catchup.streak_fold.STREAK_SETTLE_SECONDS).
                dirty = "SELECT count(*) FROM records_streaksegment WHERE dirty"
                return cluster.execute("decisionboard", dirty) == [(0,)] and all(
                    sum(t["value"] for t in metric(base, keys[name])["totals"]) == len(records)
                    and not metric(base, keys[name])["freshness"]["pending"]
                    for name, records in PROJECTS.items()
                )

            wait_until(folded, 90, "both lanes to fold every record")
            headers = {"Authorization": f"Bearer {keys['acme']}"}
            job = run_export_job(base, headers, {"format": "jsonl"})
            assert job["status"] == "done", job
            assert job["rows"] == len(PROJECTS["acme"])
            created = requests.post(f"{base}/api/v1/alert-rules", json=RULE, headers=headers,
                                    timeout=30)  # fmt: skip
            assert created.status_code == 201, created.text
            tick = manage(
                env, "shell", "-c",
                "from datetime import datetime, UTC\nfrom alerts import engine\n"
                f"t = engine.evaluate_all(now=datetime.fromisoformat({ALERT_NOW.isoformat()!r}))\n"
                "print(t.rules, t.events, t.errors)",
            ).split()[-3:]  # fmt: skip
            assert tick == ["1", "2", "0"], tick  # one rule, firing for each classifier model
            firing = cluster.execute(
                "decisionboard", "SELECT count(*) FROM alerts_alertstate WHERE state = 'firing'"
            )
            assert firing[0][0] >= 1
            lanes = cluster.execute(
                "decisionboard", "SELECT name FROM records_watermark WHERE name LIKE 'rollups%'"
            )
            assert sorted(lanes) == [("rollups:0/2",), ("rollups:1/2",)]

        # The processes are gone, PgBouncer keeps its server sessions: no lock left in one.
        held = cluster.execute(
            "decisionboard", "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
        )
        assert held == [(0,)]
        with (
            psycopg.connect(cluster.url("decisionboard"), options="-c TimeZone=UTC") as conn,
            conn.cursor() as cursor,
        ):
            got = snapshot(cursor)
    for table in SNAPSHOT:
        assert got[table] == want[table], table
    assert len(got["rollups"]) > 100 and got["runs"] and got["streaks"]

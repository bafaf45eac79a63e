"""Pages and the read API on a streaming standby (DATABASE_REPLICA_URL), for real.

A private PostgreSQL primary and a standby made from it with pg_basebackup -R, both logging
every statement, so that the test reads in their logs which one answered. The product's web
server is given the standby as its replica: what a user must see is the same answers as from
the primary, the standby's delay counted in the freshness, one's own write on the next read,
and the primary taking over, without an error, when the standby is stopped or too far behind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import requests

from config.replicas import PIN_COOKIE
from tests import rollup_data
from tests.live import PrivateCluster, private_cluster, wait_until
from workers import processes

MAX_LAG = 5  # DECISIONBOARD_REPLICA_MAX_LAG_SECONDS for the test

SETUP = """
from django.contrib.auth import get_user_model
from records.models import ApiKey, Membership, Project
user = get_user_model().objects.create_user("alice", password="pw-alice")
for name in NAMES:
    project = Project.objects.create(name=name)
    Membership.objects.create(user=user, project=project)
    print(ApiKey.issue(project, ApiKey.Scope.ALL)[1])
"""

RULE = {
    "name": "pick errors",
    "metric": "pick_error_rate",
    "group_by": "model",
    "comparator": "gt",
    "threshold": 0.1,
    "warning_threshold": 0.05,
    "window_minutes": 10,
    "min_records": 20,
    "for_minutes": 3,
    "no_data": "ok",
    "renotify_minutes": 60,
}


def manage(env: dict, *args: str, timeout: float = 300) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=processes.BASE_DIR, env=env, check=True,
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    return done.stdout


def set_up(env: dict, names: list[str]) -> list[str]:
    """Migrate, and make alice, her projects `names` and a key each; returns the keys."""
    manage(env, "migrate", "-v", "0")
    return manage(env, "shell", "-c", f"NAMES = {names!r}\n{SETUP}").split()[-len(names) :]


def product_env(database_url: str, var_dir: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_REPLICA_URL")}
    env.update(DATABASE_URL=database_url, DECISIONBOARD_VAR_DIR=str(var_dir), **extra)
    return env


def post_records(base: str, key: str, records: list[dict], batch: int = 300) -> None:
    for i in range(0, len(records), batch):
        answer = requests.post(
            f"{base}/api/v1/records", json={"records": records[i : i + batch]},
            headers={"Authorization": f"Bearer {key}"}, timeout=60,
        )  # fmt: skip
        assert answer.status_code == 200, answer.text


def log_in(base: str) -> requests.Session:
    operator = requests.Session()
    operator.get(f"{base}/accounts/login/", timeout=10)
    answer = operator.post(
        f"{base}/accounts/login/",
        data={"username": "alice", "password": "pw-alice",
              "csrfmiddlewaretoken": operator.cookies["csrftoken"]},
        timeout=10,
    )  # fmt: skip
    assert answer.ok
    return operator


def replayed(primary: PrivateCluster, standby: PrivateCluster) -> bool:
    """Whether the standby has replayed everything the primary has written so far."""
    (position,) = primary.execute("postgres", "SELECT pg_current_wal_lsn()")[0]
    return standby.execute("postgres", f"SELECT pg_last_wal_replay_lsn() >= '{position}'")[0][0]


def metric(base: str, key: str, session=requests) -> dict:
    now = datetime.now(UTC)
    answer = session.get(
        f"{base}/api/v1/metrics/records",
        params={"from": "2026-11-19T00:00:00Z", "to": (now + timedelta(hours=1)).isoformat(),
                "interval": "day"},
        headers={"Authorization": f"Bearer {key}"}, timeout=30,
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    return answer.json()


def scrape(base: str) -> str:
    answer = requests.get(f"{base}/metrics", headers={"Authorization": "Bearer scrape"}, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.text


def rule_names(base: str, key: str, session=requests) -> list[str]:
    answer = session.get(
        f"{base}/api/v1/alert-rules", headers={"Authorization": f"Bearer {key}"}, timeout=30
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    return [rule["name"] for rule in (body["results"] if isinstance(body, dict) else body)]


def test_reads_go_to_the_standby_until_it_is_down_or_too_far_behind(tmp_path):
    with private_cluster("log_statement=all") as primary:
        standby_root = Path(tempfile.mkdtemp(prefix="decisionboard-standby-"))
        env = product_env(primary.url("decisionboard"), tmp_path)
        (key,) = set_up(env, ["acme"])
        standby = primary.standby(standby_root, processes.free_port())
        try:
            standby.start("log_statement=all", "hot_standby_feedback=on")
            _check_the_replica(primary, standby, env, key, tmp_path)
        finally:
            if standby.data.exists() and standby.running():
                standby.stop("immediate")
            shutil.rmtree(standby_root, ignore_errors=True)


def _check_the_replica(primary, standby, env, key, tmp_path):
    env.update(
        DATABASE_REPLICA_URL=standby.url("decisionboard"),
        DECISIONBOARD_REPLICA_MAX_LAG_SECONDS=str(MAX_LAG),
        DECISIONBOARD_NUDGE_WORKERS="0",
        DECISIONBOARD_METRICS_TOKEN="scrape",
    )
    port = processes.free_port()
    base = f"http://127.0.0.1:{port}"
    records = rollup_data.build(300)
    for record in records[:60]:  # a session, for the sessions page's own SQL
        record["session_id"] = f"sess-{len(record['run_id']) % 3}"
    with processes.running(
        processes.web_command(f"127.0.0.1:{port}", 1), env=env, log=tmp_path / "web.log"
    ):
        wait_until(lambda: requests.get(f"{base}/accounts/login/", timeout=5).ok, 60, "web")
        post_records(base, key, records[1:])
        ingested = requests.post(
            f"{base}/api/v1/records", json={"records": records[:1]},
            headers={"Authorization": f"Bearer {key}"}, timeout=60,
        )  # fmt: skip
        assert ingested.status_code == 200
        assert PIN_COOKIE not in ingested.cookies  # ingest reads nothing back: no pin
        manage(env, "shell", "-c", "from records import catchup; catchup.catch_up()")
        operator = log_in(base)
        wait_until(lambda: replayed(primary, standby), 30, "the standby to replay")

        # Pages, the read API and a streamed export read the standby, not the primary.
        standby_mark, primary_mark = len(standby.log_text()), len(primary.log_text())
        assert operator.get(f"{base}/", timeout=30).status_code == 200
        assert operator.get(f"{base}/runs/", timeout=30).status_code == 200
        assert "sess-" in operator.get(f"{base}/sessions/", timeout=30).text
        body = metric(base, key)
        assert sum(t["value"] for t in body["totals"]) == len(records)
        exported = requests.get(
            f"{base}/api/v1/export", params={"format": "jsonl"},
            headers={"Authorization": f"Bearer {key}"}, timeout=60,
        )  # fmt: skip
        assert exported.status_code == 200 and len(exported.text.splitlines()) == len(records)
        on_standby = standby.log_text()[standby_mark:]
        on_primary = primary.log_text()[primary_mark:]
        for table in ("records_rollup", "records_run", "records_record"):
            assert table in on_standby, table
        assert 'decisionboard_replica_up{replica="replica1"} 1.0' in scrape(base)
        assert "records_rollup" not in on_primary and 'records_run"' not in on_primary

        # A fresh commit replayed, then replay paused: the standby's delay starts now.
        primary.execute("decisionboard", "CREATE TABLE replay_probe (); DROP TABLE replay_probe")
        wait_until(lambda: replayed(primary, standby), 30, "the standby to replay")
        paused_at = time.monotonic()
        standby.execute("postgres", "SELECT pg_wal_replay_pause()")
        writer = requests.Session()
        created = writer.post(
            f"{base}/api/v1/alert-rules", json=RULE,
            headers={"Authorization": f"Bearer {key}"}, timeout=30,
        )  # fmt: skip
        assert created.status_code == 201, created.text
        assert PIN_COOKIE in created.cookies
        # One's own write is read back (pinned to the primary's position by a cookie)...
        assert rule_names(base, key, writer) == [RULE["name"]]
        # ... while a reader without the cookie still reads the paused standby.
        assert rule_names(base, key) == []
        time.sleep(max(0.0, 1.5 - (time.monotonic() - paused_at)))
        standby_mark = len(standby.log_text())
        lagging = metric(base, key)["freshness"]
        assert lagging["lag_seconds"] >= 1.0, lagging
        assert "records_rollup" in standby.log_text()[standby_mark:]
        assert time.monotonic() - paused_at < MAX_LAG  # the checks above ran within the limit

        # Past the setting, everything is read from the primary.
        time.sleep(max(0.0, MAX_LAG + 1.5 - (time.monotonic() - paused_at)))
        standby_mark = len(standby.log_text())
        assert rule_names(base, key) == [RULE["name"]]
        caught_up = metric(base, key)["freshness"]
        assert caught_up["lag_seconds"] < 1.0, caught_up
        assert "records_rollup" not in standby.log_text()[standby_mark:]

        # Replaying again, the standby is read again; stopped, the primary answers, no error.
        standby.execute("postgres", "SELECT pg_wal_replay_resume()")
        wait_until(lambda: replayed(primary, standby), 30, "the standby to replay")
        time.sleep(1.2)  # the web process's view of the standby's health is a second old
        standby_mark = len(standby.log_text())
        assert rule_names(base, key) == [RULE["name"]]
        assert "alerts_" in standby.log_text()[standby_mark:]
        standby.stop("fast")
        assert 'decisionboard_replica_up{replica="replica1"} 0.0' in scrape(base)
        assert operator.get(f"{base}/", timeout=30).status_code == 200
        assert operator.get(f"{base}/runs/", timeout=30).status_code == 200
        assert sum(t["value"] for t in metric(base, key)["totals"]) == len(records)
        assert rule_names(base, key) == [RULE["name"]]

"""Two hosts sharing one PostgreSQL and one Redis, one of them killed under load.

Each "host" is a set of the product's processes of its own (gunicorn and a `default` worker)
with its own var folder and name (DECISIONBOARD_HOSTNAME); only the first runs beat. A client
posts out-of-order records to both hosts' web servers without pause; while a worker of the
second host is in the middle of a catch-up pass (it holds its lane's watermark row), that
host's workers are killed with SIGKILL. What must hold: the first host's workers take the lane
on at the next beat, every acknowledged record is stored once, the rollups are those of one
clean fold of the stored records and agree with an independent oracle, and /metrics and
`manage.py doctor` name both hosts' workers.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime

import psycopg
import pytest
import requests

from config.queues import Queue
from tests.support import rollup_data
from tests.support.live import private_cluster, redis_server, wait_until
from tests.support.services import need_service
from tests.support.standby import SNAPSHOT, product_env, reference, set_up, snapshot
from workers import processes

PROJECTS = {
    name: rollup_data.build(1500, seed=seed)
    for name, seed in (("acme", 3), ("globex", 5), ("initech", 7))
}
BATCH = 50
BEAT_PERIOD = 5.0  # config.beat_schedule: a catch-up task per lane every 5 s
RANGE = {"from": "2026-11-20T00:00:00Z", "to": "2026-11-21T00:00:00Z", "interval": "day"}

# A catch-up pass of host-b in flight: its transaction holds a lane's watermark row.
PASS_OF_HOST_B = """
SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.relation = 'records_watermark'::regclass AND l.mode = 'RowShareLock'
  AND a.application_name = 'decisionboard@host-b'
"""


class Client(threading.Thread):
    """Posts every project's records in batches, in their (shuffled in time) order, to the
    hosts' web servers in turn; keeps the ids of each acknowledged batch."""

    def __init__(self, bases: list[str], keys: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.bases, self.keys = bases, keys
        self.acknowledged: set[tuple[str, str]] = set()
        self.failures: list[str] = []

    def run(self) -> None:
        longest = max(len(records) for records in PROJECTS.values())
        batches = [
            (name, records[i : i + BATCH])
            for i in range(0, longest, BATCH)
            for name, records in PROJECTS.items()
            if records[i : i + BATCH]
        ]
        for number, (name, batch) in enumerate(batches):
            base = self.bases[number % len(self.bases)]
            try:
                answer = requests.post(
                    f"{base}/api/v1/records", json={"records": batch},
                    headers={"Authorization": f"Bearer {self.keys[name]}"}, timeout=30,
                )  # fmt: skip
            except requests.RequestException as error:
                self.failures.append(str(error))
                continue
            if answer.status_code == 200:
                self.acknowledged.update((name, r["id"]) for r in batch)
            else:
                self.failures.append(f"{answer.status_code}: {answer.text[:200]}")


def _cluster_rows(url: str, sql: str) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql).fetchall()


def test_two_hosts_lose_nothing_when_one_is_killed_mid_pass(transactional_db, postgres, tmp_path):
    need_service(shutil.which("redis-server") is not None, "redis-server")
    redis_port = processes.free_port()
    with (
        private_cluster() as cluster,
        redis_server(redis_port, tmp_path / "redis.log"),
    ):
        url = cluster.url("decisionboard")
        common = {
            "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
            "DECISIONBOARD_CATCHUP_LANES": "2",
            "DECISIONBOARD_METRICS_TOKEN": "scrape",
        }
        hosts = {}
        for host in ("host-a", "host-b"):
            (tmp_path / host).mkdir()
            hosts[host] = product_env(url, tmp_path / host, DECISIONBOARD_HOSTNAME=host, **common)
        keys = dict(zip(PROJECTS, set_up(hosts["host-a"], list(PROJECTS)), strict=True))
        ports = {host: processes.free_port() for host in hosts}
        bases = [f"http://127.0.0.1:{ports[host]}" for host in hosts]
        worker_a = processes.worker_command(
            [Queue.DEFAULT], 2, name="default", host="host-a",
            beat_schedule=tmp_path / "host-a" / "beat",
        )  # fmt: skip
        worker_b = processes.worker_command([Queue.DEFAULT], 2, name="default", host="host-b")
        with (
            processes.running(processes.web_command(f"127.0.0.1:{ports['host-a']}", 1),
                              env=hosts["host-a"], log=tmp_path / "web-a.log"),
            processes.running(processes.web_command(f"127.0.0.1:{ports['host-b']}", 1),
                              env=hosts["host-b"], log=tmp_path / "web-b.log"),
            processes.running(worker_a, env=hosts["host-a"], log=tmp_path / "worker-a.log"),
            processes.running(worker_b, env=hosts["host-b"], log=tmp_path / "worker-b.log")
            as host_b,
        ):  # fmt: skip
            for base in bases:
                wait_until(lambda b=base: requests.get(f"{b}/accounts/login/", timeout=5).ok,
                           60, "web")  # fmt: skip
            # Both hosts' workers say they are alive, under their host's name.
            wait_until(
                lambda: (
                    len(_cluster_rows(url, "SELECT DISTINCT host FROM workers_workerhost")) == 2
                ),
                60,
                "both hosts' workers",
            )
            scraped = requests.get(
                f"{bases[0]}/metrics", headers={"Authorization": "Bearer scrape"}, timeout=30
            ).text
            assert 'host="host-a"' in scraped and 'host="host-b"' in scraped
            doctor = subprocess.run(
                [sys.executable, "manage.py", "doctor"], cwd=processes.BASE_DIR,
                env=hosts["host-a"], capture_output=True, text=True, timeout=120,
            ).stdout  # fmt: skip
            assert "host host-a: default@host-a" in doctor, doctor
            assert "host host-b: default@host-b" in doctor, doctor

            client = Client(bases, keys)
            client.start()
            mid_pass = wait_until(
                lambda: _cluster_rows(url, PASS_OF_HOST_B)[0][0] > 0 or None,
                60,
                "a catch-up pass of host-b",
            )
            os.killpg(host_b.pid, signal.SIGKILL)  # the worker and its pool processes
            killed_at = datetime.now(UTC)
            assert mid_pass
            # host-a's worker takes both lanes: each passes again within a beat (and the
            # spacing) of the kill.
            wait_until(
                lambda: all(
                    at is not None and at > killed_at
                    for (at,) in _cluster_rows(
                        url,
                        "SELECT last_pass_at FROM records_watermark WHERE name LIKE 'rollups:%'",
                    )
                ),
                BEAT_PERIOD + 10,
                "host-a to take the lanes on",
            )
            client.join(120)
            assert not client.is_alive()
            assert not client.failures, client.failures[:3]

            def folded() -> bool:
                ((newest,),) = _cluster_rows(url, "SELECT coalesce(max(id), 0) FROM records_record")
                ((lowest,),) = _cluster_rows(
                    url, "SELECT min(last_id) FROM records_watermark WHERE name LIKE 'rollups:%'"
                )
                # Streak minutes a late verdict dirtied settle after the rollups
                # (records.catchup.streak_fold.STREAK_SETTLE_SECONDS): folded once none is left.
                ((dirty,),) = _cluster_rows(
                    url, "SELECT count(*) FROM records_streaksegment WHERE dirty"
                )
                return lowest >= newest and dirty == 0

            wait_until(folded, 120, "the catch-up to fold every record and settle the streaks")
            time.sleep(0.5)
            oracle_totals = {name: _pick_error_rate(bases[0], keys[name]) for name in PROJECTS}

        stored = _cluster_rows(
            url,
            "SELECT p.name, r.record_key, count(*) FROM records_record r "
            "JOIN records_project p ON p.id = r.project_id GROUP BY 1, 2",
        )
        assert all(n == 1 for *_, n in stored)
        stored_ids = {(name, key) for name, key, _ in stored}
        posted_ids = {(name, r["id"]) for name, records in PROJECTS.items() for r in records}
        assert client.acknowledged <= stored_ids <= posted_ids
        assert client.acknowledged == posted_ids  # host-b's web kept answering
        with (
            psycopg.connect(url, options="-c TimeZone=UTC") as conn,
            conn.cursor() as cursor,
        ):
            got = snapshot(cursor)
    want = reference(PROJECTS)
    for table in SNAPSHOT:
        assert got[table] == want[table], table
    for name, records in PROJECTS.items():
        exact = rollup_data.exact(records)["pick_error_rate"]
        assert set(oracle_totals[name]) == set(exact)
        for model, (value, count) in exact.items():
            assert oracle_totals[name][model][1] == count
            assert oracle_totals[name][model][0] == pytest.approx(value, rel=1e-9)


def _pick_error_rate(base: str, key: str) -> dict:
    body = requests.get(
        f"{base}/api/v1/metrics/pick_error_rate", params={**RANGE, "group_by": "model"},
        headers={"Authorization": f"Bearer {key}"}, timeout=30,
    ).json()  # fmt: skip
    return {t["group"]["model"]: (t["value"], t["count"]) for t in body["totals"]}

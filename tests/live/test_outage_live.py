"""A real PostgreSQL outage under a live server while a client keeps posting.

A private PostgreSQL cluster (initdb into a temporary folder, on a free port) runs behind
gunicorn and a Celery worker with beat, as in production. A client thread posts batches of
records with ids without pause; the test stops the cluster for 10 s and starts it again. What
the client must see: 503 with Retry-After and a JSON body during the outage (a page: a plain
503 page), 2xx again once the database is back, no batch stored in part, every acknowledged
id stored exactly once, and the rollups catching up without anyone restarting anything.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import psycopg
import requests

from config.outage import RETRY_AFTER_SECONDS
from tests.support.factories import record
from tests.support.live import PrivateCluster, private_cluster, wait_until
from workers import processes

OUTAGE_SECONDS = 10
BATCH = 20


_SETUP = """
from django.contrib.auth import get_user_model
from records.models import ApiKey, Membership, Project
project = Project.objects.create(name="acme")
user = get_user_model().objects.create_user("alice", password="pw-alice")
Membership.objects.create(user=user, project=project, role="admin")
print(ApiKey.issue(project, ApiKey.Scope.ALL)[1])
"""


@dataclass
class Answer:
    ids: list[str]
    status: int | None  # None: no HTTP answer at all
    retry_after: str | None = None
    json: dict | None = None
    at: float = field(default_factory=time.monotonic)  # when the answer came
    sent: float = 0.0  # when the request left


class Client(threading.Thread):
    """Posts batches of records with ids, one after another, until stopped."""

    def __init__(self, base: str, key: str) -> None:
        super().__init__(daemon=True)
        self.base, self.key = base, key
        self.answers: list[Answer] = []
        self.stopping = threading.Event()
        self.next_id = 0
        self.ts = (datetime.now(UTC) - timedelta(minutes=2)).isoformat().replace("+00:00", "Z")

    def run(self) -> None:
        while not self.stopping.is_set():
            batch = [record(id=f"o-{self.next_id + i}", ts=self.ts) for i in range(BATCH)]
            self.next_id += BATCH
            self.answers.append(post(self.base, self.key, batch))
            time.sleep(0.02)


def post(base: str, key: str, batch: list[dict]) -> Answer:
    ids = [r["id"] for r in batch]
    sent = time.monotonic()
    try:
        response = requests.post(
            f"{base}/api/v1/records",
            json={"records": batch},
            headers={"Authorization": f"Bearer {key}"},
            timeout=20,
        )
    except requests.RequestException:
        return Answer(ids, None, sent=sent)
    try:
        body = response.json()
    except ValueError:
        body = None
    return Answer(ids, response.status_code, response.headers.get("Retry-After"), body, sent=sent)


def stored_ids(cluster: PrivateCluster) -> list[str]:
    with psycopg.connect(cluster.url("decisionboard")) as conn:
        return [k for (k,) in conn.execute("SELECT record_key FROM records_record")]


def rolled_up(base: str, key: str) -> int:
    now = datetime.now(UTC)
    body = requests.get(
        f"{base}/api/v1/metrics/records",
        params={"from": (now - timedelta(hours=1)).isoformat(), "to": now.isoformat(),
                "interval": "hour"},
        headers={"Authorization": f"Bearer {key}"},
        timeout=10,
    ).json()  # fmt: skip
    return sum(t["value"] for t in body["totals"])


def test_a_postgresql_outage_answers_503_loses_nothing_and_recovers_by_itself(tmp_path):
    with private_cluster() as cluster:
        env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
        env.update(DATABASE_URL=cluster.url("decisionboard"), DECISIONBOARD_VAR_DIR=str(tmp_path))
        manage = [sys.executable, "manage.py"]
        subprocess.run([*manage, "migrate", "-v", "0"], cwd=processes.BASE_DIR, env=env,
                       check=True, timeout=300)  # fmt: skip
        key = subprocess.run(
            [*manage, "shell", "-c", _SETUP], cwd=processes.BASE_DIR, env=env, check=True,
            capture_output=True, text=True, timeout=120,
        ).stdout.split()[-1]  # fmt: skip

        port = processes.free_port()
        base = f"http://127.0.0.1:{port}"
        default_worker = processes.worker_commands(tmp_path / "beat-schedule")[0]
        with (
            processes.running(processes.web_command(f"127.0.0.1:{port}", 2), env=env,
                              log=tmp_path / "web.log"),
            processes.running(default_worker, env=env, log=tmp_path / "worker.log"),
        ):  # fmt: skip
            wait_until(lambda: requests.get(f"{base}/accounts/login/", timeout=5).ok, 60, "web")
            operator = requests.Session()
            operator.get(f"{base}/accounts/login/", timeout=10)
            operator.post(
                f"{base}/accounts/login/",
                data={"username": "alice", "password": "pw-alice",
                      "csrfmiddlewaretoken": operator.cookies["csrftoken"]},
                timeout=10,
            )  # fmt: skip
            assert operator.get(f"{base}/runs/", timeout=10).status_code == 200

            client = Client(base, key)
            client.start()
            try:
                wait_until(lambda: len(client.answers) >= 5, 30, "the first batches")
                cluster.stop()
                down_at = time.monotonic()
                # A page and a read during the outage.
                page = operator.get(f"{base}/runs/", timeout=10)
                read = requests.get(
                    f"{base}/api/v1/runs", headers={"Authorization": f"Bearer {key}"}, timeout=10
                )
                time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - down_at)))
                # The outage ends when the start begins: the server takes connections a moment
                # before pg_ctl returns, and a batch may be stored in that moment.
                restart_at = time.monotonic()
                cluster.start()
                up_at = time.monotonic()
                wait_until(
                    lambda: any(a.at > up_at and a.status == 200 for a in client.answers),
                    30,
                    "ingest to answer 200 again",
                )
                time.sleep(1)
            finally:
                client.stopping.set()
                client.join(30)

            assert page.status_code == 503 and page.headers["Retry-After"]
            assert page.headers["Content-Type"].startswith("text/html")
            assert "cannot reach its database" in page.text
            assert read.status_code == 503 and read.json()["code"] == "database_unavailable"

            answers = client.answers
            # Sent once the cluster was down and answered before it was back: a batch sent just
            # before the stop may still commit and be answered 200 a moment after it.
            during = [a for a in answers if down_at < a.sent and a.at < restart_at]
            assert during and all(a.status == 503 for a in during), during
            # Every answer was either a success or a 503 that says when to come back.
            assert {a.status for a in answers} <= {200, 503}, {a.status for a in answers}
            refused = [a for a in answers if a.status == 503]
            assert all(a.retry_after == str(RETRY_AFTER_SECONDS) for a in refused)
            assert all(a.json["code"] == "database_unavailable" for a in refused)
            assert answers[-1].status == 200  # recovered without a restart

            stored = stored_ids(cluster)
            assert len(stored) == len(set(stored))  # nothing stored twice
            stored_set = set(stored)
            acknowledged = {i for a in answers if a.status == 200 for i in a.ids}
            assert acknowledged <= stored_set
            for answer in refused:  # a refused batch is stored whole or not at all
                assert len(stored_set & set(answer.ids)) in (0, BATCH)

            # The client resends what was refused; ids make that safe.
            for answer in refused:
                again = post(base, key, [record(id=i, ts=client.ts) for i in answer.ids])
                assert again.status == 200
                assert again.json["accepted"] + again.json["duplicates"] == BATCH
            stored = stored_ids(cluster)
            everything = {i for a in answers for i in a.ids}
            assert sorted(stored) == sorted(everything)

            # The worker retried through the outage and resumed from the watermark.
            wait_until(lambda: rolled_up(base, key) == len(stored), 60, "the rollups")

"""/healthz (the process answers) and /readyz (it can serve: database, migrations, broker)."""

from __future__ import annotations

import os
import subprocess
import sys

import requests

from tests.support.live import private_cluster, wait_until, web_server
from tests.support.migrations import forget_migration, latest_migration
from workers import processes


def test_healthz_answers_without_asking_the_database(db, client, django_assert_num_queries):
    with django_assert_num_queries(0):
        response = client.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}
    assert "no-cache" in response["Cache-Control"]


def test_readyz_is_ready_when_the_database_migrations_and_broker_are(db, client):
    response = client.get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ready"
    assert {name: check["ok"] for name, check in body["checks"].items()} == {
        "database": True, "migrations": True, "broker": True,
    }  # fmt: skip


def test_readyz_is_503_while_a_migration_is_not_applied(db, client):
    app, name = latest_migration()
    forget_migration(app, name)
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["migrations"]["ok"] is False
    assert f"{app}.{name}" in body["checks"]["migrations"]["detail"]
    assert body["checks"]["database"]["ok"] is True


def test_readyz_is_503_when_the_broker_is_unreachable(db, client, settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{processes.free_port()}/0"
    response = client.get("/readyz")
    assert response.status_code == 503
    broker = response.json()["checks"]["broker"]
    assert broker["ok"] is False and "unreachable" in broker["detail"]


def test_readyz_is_503_while_postgresql_is_stopped_and_ready_again_after(tmp_path):
    with private_cluster() as cluster:
        url = cluster.url("decisionboard")
        subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"],
                       cwd=processes.BASE_DIR, env={**os.environ, "DATABASE_URL": url,
                                                    "DECISIONBOARD_VAR_DIR": str(tmp_path)},
                       check=True, timeout=300)  # fmt: skip
        with web_server(tmp_path, database=url) as base:
            assert requests.get(f"{base}/readyz", timeout=10).status_code == 200
            cluster.stop()
            down = requests.get(f"{base}/readyz", timeout=30)
            assert down.status_code == 503
            checks = down.json()["checks"]
            assert checks["database"]["ok"] is False
            assert checks["migrations"]["ok"] is False
            # The process itself is fine: a load balancer keeps it, an orchestrator need not
            # restart it.
            assert requests.get(f"{base}/healthz", timeout=10).status_code == 200
            cluster.start()
            ready = wait_until(
                lambda: requests.get(f"{base}/readyz", timeout=10).status_code == 200,
                30, "/readyz to answer 200 again",
            )  # fmt: skip
            assert ready

"""The README's start command brings up web, a real Celery worker and beat, and demo data."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import grpc
import requests
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub

from tests.support.live import STARTUP_SECONDS, run_export_job, wait_until
from workers import processes


def test_it_starts_the_product_on_embedded_defaults(tmp_path):
    port = processes.free_port()
    # Embedded defaults, as on a fresh machine: no DATABASE_URL, no REDIS_URL.
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["DECISIONBOARD_VAR_DIR"] = str(tmp_path)
    # The OTLP/gRPC receiver on a port of its own (4317 may be taken on a shared machine).
    grpc_port = processes.free_port()
    env["DECISIONBOARD_OTLP_GRPC_PORT"] = str(grpc_port)
    log = open(tmp_path / "serve.log", "w+")
    proc = processes.spawn(
        [
            sys.executable,
            "manage.py",
            "serve",
            "--port",
            str(port),
            "--demo-records",
            "600",
            "--demo-runs",
            "6",
            "--web-workers",
            "1",
        ],
        env=env,
        log=log,
    )
    try:
        banner = wait_until(
            lambda: (
                "Decisionboard is running" in (text := (tmp_path / "serve.log").read_text())
                and text
            ),
            120,
            "the start banner",
        )
        password = re.search(r"log in as:\s+admin / (\S+)", banner).group(1)
        api_key = re.search(r"ingest key:\s+(\S+)", banner).group(1)
        base = f"http://127.0.0.1:{port}"

        def up():
            try:
                return requests.get(f"{base}/accounts/login/", timeout=10).status_code == 200
            except requests.RequestException:  # not up yet, or too busy to answer in time
                return False

        wait_until(up, STARTUP_SECONDS, "the web server")

        def doctor() -> str:
            done = subprocess.run(
                [sys.executable, "manage.py", "doctor", "--no-color"], cwd=processes.BASE_DIR,
                env=env, capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert done.returncode == 0, done.stdout + done.stderr
            assert "FIX" not in done.stdout
            return done.stdout

        # Right after the start, before beat's first heartbeat has come round (or just after):
        # nothing is broken, and the embedded defaults are advice for going live.
        output = doctor()
        assert "database: sqlite reachable" in output and "all applied" in output
        assert "prod  the database is SQLite" in output
        assert re.search(r"queue default: (no heartbeat yet; workers started|served)", output)
        session = requests.Session()
        session.get(f"{base}/accounts/login/")
        login = session.post(
            f"{base}/accounts/login/",
            data={
                "username": "admin",
                "password": password,
                "csrfmiddlewaretoken": session.cookies["csrftoken"],
            },
            headers={"Referer": f"{base}/accounts/login/"},
        )
        assert login.status_code == 200 and "Recent runs" in login.text
        assert "demo" in login.text

        posted = requests.post(
            f"{base}/api/v1/records",
            data=json.dumps(
                {
                    "kind": "notice",
                    "run_id": "smoke-run",
                    "ts": "2026-01-01T00:00:00Z",
                    "data": {"code": "smoke.test", "message": "hello", "detail": {}},
                }
            ),
            headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"},
            timeout=10,
        )
        assert posted.json() == {"accepted": 1, "duplicates": 0, "rejected": []}
        # The banner's own example, run as printed from another directory: the printed key
        # and the example file it names.
        command = re.search(r"post:\s+(curl .*)", banner).group(1)
        answer = subprocess.run(
            command, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
        assert json.loads(answer.stdout) == {"accepted": 5, "duplicates": 0, "rejected": []}
        assert "smoke-run" in session.get(f"{base}/").text
        # The receiver the banner names takes an OTLP/gRPC export with the same key.
        assert f"OTLP/gRPC:   127.0.0.1:{grpc_port}" in banner
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=30)
            answer = TraceServiceStub(channel).Export(
                ExportTraceServiceRequest(), metadata=(("authorization", f"Bearer {api_key}"),)
            )
        assert not answer.HasField("partial_success")

        # Beat sends a heartbeat to every queue and the two workers run them: the page shows
        # each queue served.
        def served() -> bool:
            page = session.get(f"{base}/").text
            return "Workers, last heartbeat" in page and "No worker has served" not in page

        wait_until(served, 60, "a heartbeat on every queue")
        assert "queue exports: served" in doctor()

        # The second worker (notifications and exports) runs an export job on the same broker.
        auth = {"Authorization": f"Bearer {api_key}"}
        job = run_export_job(base, auth, {"format": "csv", "run_id": "smoke-run"})
        assert job["status"] == "done" and job["rows"] == 1, job
    finally:
        processes.stop([proc], timeout=30)
        log.close()
    assert proc.returncode == 0, (tmp_path / "serve.log").read_text()[-3000:]

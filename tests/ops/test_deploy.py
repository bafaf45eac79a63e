"""deploy/ stays in step with the code: a worker for every queue, the shipped gunicorn
configuration, a proxy that lets ingest bodies through and says when a request came over HTTPS."""

from __future__ import annotations

import re

from api.otlp_grpc import SERVICE
from config.env import parse_size
from config.queues import Queue
from workers.processes import BASE_DIR

DEPLOY = BASE_DIR / "deploy"


def procfile() -> dict[str, str]:
    lines = (DEPLOY / "Procfile").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines if line.strip())


def test_the_procfile_runs_web_beat_and_a_worker_per_queue():
    processes = procfile()
    assert "gunicorn --config gunicorn.conf.py" in processes["web"]
    assert processes["beat"].startswith("celery -A config beat")
    for queue in Queue:
        assert f"--queues {queue.value} " in processes[f"worker_{queue.value}"]
    assert "migrate" in processes["release"]


def test_the_systemd_units_run_the_same_commands():
    units = DEPLOY / "systemd"
    web = (units / "decisionboard-web.service").read_text()
    assert re.search(r"^ExecStart=\S+/gunicorn --config gunicorn.conf.py ", web, re.M)
    worker = (units / "decisionboard-worker@.service").read_text()
    # %i is the queue (the instance name); %%h reaches Celery as its own %h (the host name).
    assert "celery -A config worker --queues %i --hostname %i@%%h" in worker
    for queue in Queue:
        assert f"decisionboard-worker@{queue.value}" in worker
    assert "celery -A config beat" in (units / "decisionboard-beat.service").read_text()


def test_the_otlp_grpc_receiver_runs_under_systemd_and_the_procfile_behind_the_proxy():
    unit = (DEPLOY / "systemd" / "decisionboard-otlp-grpc.service").read_text()
    assert re.search(
        r"^ExecStart=\S+/python manage.py serve_otlp_grpc --host 127.0.0.1 ", unit, re.M
    )
    assert procfile()["otlp_grpc"].startswith("python manage.py serve_otlp_grpc ")
    site = (DEPLOY / "nginx" / "decisionboard.conf").read_text()
    # The exporters' path is the service's: the proxy passes exactly those calls on.
    assert f"location /{SERVICE}/ {{\n        grpc_pass grpc://127.0.0.1:4317;" in site


def test_nginx_lets_the_largest_ingest_body_through_and_sets_the_https_header():
    site = (DEPLOY / "nginx" / "decisionboard.conf").read_text()
    proxy = (DEPLOY / "nginx" / "decisionboard_proxy.conf").read_text()
    limit = re.search(r"client_max_body_size (\w+);", site).group(1)
    assert parse_size(limit) > parse_size("5MB")  # DECISIONBOARD_INGEST_MAX_BODY's default
    assert "proxy_set_header X-Forwarded-Proto $scheme;" in proxy
    assert "alias /srv/decisionboard/var/static/;" in site

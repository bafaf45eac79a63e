"""The objects of startup are out of the garbage collector's full walks (ops/heap.py), in web
processes (gunicorn.conf.py's post_worker_init), Celery pool processes (worker_process_init) and
the OTLP/gRPC receiver (`manage.py serve_otlp_grpc`).

Each runs in a fresh interpreter: freezing the test process's objects would keep whatever the
other tests leave behind for the rest of the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from django.conf import settings

_PROBE = """
import gc, json, os, runpy, sys
import django
django.setup()
before = len(gc.get_objects())
{action}
print(json.dumps({{
    "before": before,
    "frozen": gc.get_freeze_count(),
    "walked": len(gc.get_objects()),
    "views": "dashboard.charts.plotting" in sys.modules and "api.ingest" in sys.modules,
}}))
"""


def _probe(action: str) -> dict:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="config.settings")
    done = subprocess.run(
        [sys.executable, "-c", _PROBE.format(action=action)],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_web_worker_freezes_what_it_loaded_with_the_views_imported_first():
    got = _probe('runpy.run_path("gunicorn.conf.py")["post_worker_init"](None)')
    assert got["views"]  # imported before the freeze, not at the first request after it
    # What a full collection walks: a small part of what the process held at startup.
    assert got["frozen"] > got["before"]
    assert got["walked"] < got["frozen"] / 10, got


def test_a_celery_pool_process_freezes_what_it_started_with():
    got = _probe(
        "from celery.signals import worker_process_init\n"
        "import config.celery\n"
        "worker_process_init.send(sender=None)"
    )
    assert got["frozen"] > 0.9 * got["before"]
    assert got["walked"] < got["frozen"] / 10, got


def test_the_otlp_grpc_receiver_freezes_what_it_serves_with():
    # The command serves until SIGTERM: sent once it listens and handles the signal.
    got = _probe(
        "import signal, threading, time\n"
        "from django.core.management import call_command\n"
        "from workers.processes import free_port\n"
        "def stop():\n"
        "    while signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:\n"
        "        time.sleep(0.05)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "threading.Thread(target=stop, daemon=True).start()\n"
        "call_command('serve_otlp_grpc', '--port', str(free_port()), '--grace', '0',\n"
        "             stdout=sys.stderr)"
    )
    assert got["frozen"] > got["before"]
    assert got["walked"] < got["frozen"] / 10, got


def test_nothing_is_frozen_until_a_process_says_so():
    got = _probe("import config.celery, config.wsgi")
    assert got["frozen"] == 0

"""`manage.py doctor`: success on a production set-up and on the local install `bin/start`
makes; each thing broken named, with the fix, and exit 1. `doctor --deploy` also fails on what a
production installation needs and a local one does without."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from config.queues import Queue
from ops.doctor import default_queue_slots, examine, lanes, otlp_grpc, queues
from ops.readiness import configuration
from tests.support.live import wait_until
from tests.support.migrations import forget_migration, latest_migration
from tests.support.services import database_url, need_service
from workers import heartbeat, processes
from workers.heartbeat import STALE_AFTER, status_of
from workers.models import Heartbeat

SECRET = "k3y-" + "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJ" * 2


@pytest.fixture
def production(postgres, settings, tmp_path):
    """An installation set up as deploy/ says: every setting, HTTPS, workers on every queue."""
    settings.VAR_DIR = tmp_path
    settings.SECRET_KEY = SECRET
    settings.DEBUG = False
    settings.ALLOWED_HOSTS = ["decisions.example.com"]
    settings.SITE_URL = "https://decisions.example.com"
    settings.DECISIONBOARD = {**settings.DECISIONBOARD, "METRICS_TOKEN": "t" * 12 + "u" * 20}
    # What DECISIONBOARD_HTTPS=1 turns on.
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = True
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_HSTS_SECONDS = 31_536_000
    settings.SECURE_HSTS_INCLUDE_SUBDOMAINS = settings.SECURE_HSTS_PRELOAD = True
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    for queue in Queue:
        heartbeat.beat(queue)
    return settings


def doctor(*args: str) -> tuple[str, CommandError | None]:
    out = StringIO()
    try:
        call_command("doctor", *args, stdout=out)
    except CommandError as exc:
        return out.getvalue(), exc
    return out.getvalue(), None


def test_it_finds_nothing_to_fix_in_a_production_set_up(production):
    output, error = doctor()
    assert error is None, output
    assert "FIX" not in output
    assert output.rstrip().endswith("Nothing to fix.")
    for line in ("database: postgresql reachable", "all applied", "queue exports: served"):
        assert line in output


def test_it_asks_for_https_before_going_live(production):
    production.SESSION_COOKIE_SECURE = production.CSRF_COOKIE_SECURE = False
    production.SECURE_HSTS_SECONDS = 0
    output, error = doctor("--deploy")
    assert str(error) == "1 thing to fix (see FIX)"
    assert "FIX   not set up for HTTPS (security.W004, security.W012, security.W016)" in output
    assert "set DECISIONBOARD_HTTPS=1" in output
    # Without --deploy, advice: nothing is broken.
    output, error = doctor()
    assert error is None, output
    assert "prod  not set up for HTTPS" in output and "set DECISIONBOARD_HTTPS=1" in output
    assert "1 thing to do before going live" in output


def test_it_rejects_the_secret_key_generated_for_the_embedded_default(production, tmp_path):
    (tmp_path / "secret_key").write_text(SECRET)
    output, error = doctor("--deploy")
    assert str(error) == "1 thing to fix (see FIX)"
    assert "SECRET_KEY is not set" in output and "set SECRET_KEY in the environment" in output


def test_it_passes_a_local_install_and_fails_it_only_before_going_live(production, tmp_path):
    # bin/start's embedded defaults: the generated key, this machine only, plain HTTP.
    (tmp_path / "secret_key").write_text(SECRET)
    production.ALLOWED_HOSTS = ["localhost", "127.0.0.1", "[::1]"]
    production.SESSION_COOKIE_SECURE = production.CSRF_COOKIE_SECURE = False
    production.SECURE_SSL_REDIRECT = False
    production.SECURE_HSTS_SECONDS = 0
    output, error = doctor()
    assert error is None, output
    assert "FIX" not in output
    for line in ("prod  SECRET_KEY is not set", "prod  ALLOWED_HOSTS names only this machine",
                 "prod  not set up for HTTPS", "3 things to do before going live",
                 "database: postgresql reachable", "queue default: served"):  # fmt: skip
        assert line in output
    assert output.rstrip().endswith("Nothing to fix.")
    output, error = doctor("--deploy")
    assert str(error) == "3 things to fix (see FIX)"
    assert "FIX   SECRET_KEY is not set" in output and "prod  " not in output


def test_it_names_a_queue_no_worker_serves_and_the_command_to_serve_it(production):
    heartbeat.beat(Queue.EXPORTS, timezone.now() - timedelta(minutes=5))
    output, error = doctor()
    assert str(error) == "1 thing to fix (see FIX)"
    assert "queue exports: last served 300 s ago" in output
    assert "celery -A config worker --queues exports" in output
    assert "queue default: served" in output


def test_it_suspects_beat_when_no_queue_is_served(production):
    for queue in Queue:
        heartbeat.beat(queue, timezone.now() - timedelta(minutes=3))
    output, error = doctor()
    assert str(error) == "4 things to fix (see FIX)"
    assert "beat, which sends the heartbeats, may be down" in output
    assert "celery -A config beat" in output


def test_it_gives_a_queue_whose_workers_just_started_a_period_to_get_its_first_heartbeat():
    now = timezone.now()
    started = now - timedelta(seconds=5)
    found = queues([status_of("default", None, started, now)], now)
    assert [(f.ok, f.problem) for f in found] == [(False, False)]
    assert found[0].message == (
        "queue default: no heartbeat yet; workers started 5 s ago (unserved if none comes "
        "within 60 s of the start)"
    )
    # A restart: the last heartbeat is from before it, so it says nothing of these workers yet.
    found = queues([status_of("default", now - timedelta(hours=1), started, now)], now)
    assert [(f.ok, f.problem) for f in found] == [(False, False)]
    assert "no heartbeat yet; workers started 5 s ago; the previous one 3600 s ago" in (
        found[0].message
    )
    # Past the period with still none: unserved.
    later = started + STALE_AFTER + timedelta(seconds=1)
    found = queues([status_of("default", None, started, later)], later)
    assert [f.problem for f in found] == [True, True]
    assert found[0].message == (
        "queue default: no heartbeat since workers started 61 s ago (more than 60 s)"
    )
    assert "celery -A config beat" in found[0].fix
    # Served since the start: the start no longer matters.
    found = queues([status_of("default", now - timedelta(seconds=1), started, now)], now)
    assert [(f.ok, f.message) for f in found] == [(True, "queue default: served 1 s ago")]


@pytest.mark.django_db(transaction=True)  # the worker's rows are committed by another process
def test_it_waits_for_the_first_heartbeat_of_a_worker_that_just_started(postgres, tmp_path):
    # A real worker on every queue and no beat: it records its start, and no heartbeat comes.
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env.update(DATABASE_URL=database_url(), DECISIONBOARD_VAR_DIR=str(tmp_path))
    worker = processes.worker_command(list(Queue), 1, name="doctor-test")
    with processes.running(worker, env=env, log=tmp_path / "worker.log"):
        wait_until(
            lambda: Heartbeat.objects.filter(worker_started__isnull=False).count() == len(Queue),
            60,
            "the worker's start on every queue",
        )
        findings = [f for f in examine() if f.section == "queues"]
    assert not any(f.problem for f in findings), findings
    assert [f.message.split(";")[0] for f in findings] == [
        f"queue {q}: no heartbeat yet" for q in Queue
    ]
    started = Heartbeat.objects.get(name="default").worker_started
    late = [f for f in examine(started + STALE_AFTER + timedelta(seconds=1)) if f.problem]
    assert [f.message for f in late][:3] == [
        f"queue {q}: no heartbeat since workers started 61 s ago (more than 60 s)" for q in Queue
    ]


def test_it_names_migrations_not_applied(production):
    app, name = latest_migration()
    forget_migration(app, name)
    output, error = doctor()
    assert str(error) == "1 thing to fix (see FIX)"
    assert f"1 not applied: {app}.{name}" in output
    assert "run: python manage.py migrate" in output


def test_it_says_when_the_broker_is_unreachable(production):
    production.REDIS_URL = f"redis://127.0.0.1:{processes.free_port()}/0"
    output, error = doctor()
    assert str(error) == "1 thing to fix (see FIX)"
    assert "broker: Redis at REDIS_URL is unreachable" in output
    assert "start Redis, or correct REDIS_URL" in output


def test_it_says_when_the_database_is_unreachable_and_exits_1(tmp_path):
    env = dict(
        os.environ,
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{processes.free_port()}/decisionboard",
        DECISIONBOARD_VAR_DIR=str(tmp_path),
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "doctor", "--no-color"], cwd=processes.BASE_DIR, env=env,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    assert "FIX   database: unreachable" in done.stdout
    assert "start PostgreSQL, or correct DATABASE_URL" in done.stdout
    assert "migrations\n  FIX   not checked: the database is unreachable" in done.stdout
    assert "things to fix" in done.stderr


GOOD = dict(
    secret_key=SECRET,
    generated_secret_key=None,
    debug=False,
    allowed_hosts=["decisions.example.com"],
    database_engine="django.db.backends.postgresql",
    redis_url="redis://redis:6379/0",
    site_url="https://decisions.example.com",
    metrics_token="x" * 40,
)


@pytest.mark.parametrize(
    ("change", "message", "fix"),
    [
        ({"debug": True}, "DEBUG is on", "set DEBUG=0"),
        ({"allowed_hosts": ["*"]}, "ALLOWED_HOSTS accepts any Host header", "ALLOWED_HOSTS="),
        ({"allowed_hosts": ["localhost", "127.0.0.1", "[::1]"]}, "names only this machine",
         "ALLOWED_HOSTS=decisions.example.com"),
        ({"database_engine": "django.db.backends.sqlite3"}, "the database is SQLite",
         "DATABASE_URL=postgres://"),
        ({"secret_key": "short"}, "SECRET_KEY is short", "SECRET_KEY"),
        ({"generated_secret_key": SECRET}, "SECRET_KEY is not set", "SECRET_KEY"),
        ({"metrics_token": "abc"}, "DECISIONBOARD_METRICS_TOKEN is shorter", "longer"),
    ],
)  # fmt: skip
def test_each_configuration_mistake_is_advice_before_going_live_with_its_fix(change, message, fix):
    assert not any(f.advice or f.problem for f in configuration(**GOOD))
    found = [f for f in configuration(**{**GOOD, **change}) if not f.ok and not f.note]
    assert [(f.advice, f.problem) for f in found] == [(True, False)]
    assert message in found[0].message and fix in found[0].fix


def test_an_unsupported_database_engine_is_broken():
    (found,) = [f for f in configuration(**{**GOOD, "database_engine": "x.mysql"}) if not f.ok]
    assert found.problem and "is not supported" in found.message


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"redis_url": None}, "REDIS_URL is not set"),
        ({"site_url": "http://127.0.0.1:8000"}, "SITE_URL is the default"),
        ({"metrics_token": ""}, "/metrics is off"),
    ],
)
def test_choices_an_operator_may_make_on_purpose_are_notes(change, message):
    notes = [f for f in configuration(**{**GOOD, **change}) if not f.ok]
    assert [(n.note, message in n.message) for n in notes] == [(True, True)]


# --- catch-up lanes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("configured", "slots", "ok", "note", "message", "fix"),
    [
        (1, None, True, False, "1 catch-up lane", ""),
        (3, {"default@a": 2}, False, False, "3 catch-up lanes (DECISIONBOARD_CATCHUP_LANES), "
         "but the workers on queue default have 2 process slots (default@a: 2): at most 2",
         "--concurrency 4"),
        (3, {"default@a": 1, "default@b": 1}, False, False, "2 process slots", 
         "DECISIONBOARD_CATCHUP_LANES=2"),
        (2, {"default@a": 2}, False, True, "exactly 2 process slots", "--concurrency 3"),
        (2, {"default@a": 2, "default@b": 2}, True, False, "4 process slots", ""),
        (4, {}, False, True, "no worker on queue default answered", "--concurrency 5"),
        (4, None, False, True, "not checked", ""),
    ],
)  # fmt: skip
def test_the_lanes_need_a_process_slot_each_on_the_default_queue(
    configured, slots, ok, note, message, fix
):
    (finding,) = lanes(configured, slots)
    assert (finding.ok, finding.note) == (ok, note)
    assert message in finding.message and fix in finding.fix


def test_it_asks_the_running_workers_how_many_lanes_can_run_at_once(production, tmp_path):
    redis_url = os.environ.get("REDIS_URL")
    need_service(bool(redis_url), "Redis (set REDIS_URL)")
    production.REDIS_URL = redis_url
    env = dict(
        os.environ,
        DATABASE_URL=database_url(),
        REDIS_URL=redis_url,
        DECISIONBOARD_VAR_DIR=str(tmp_path),
    )
    worker = processes.worker_command([Queue.DEFAULT], 2, name="lanes-test")
    jobs = processes.worker_command([Queue.EXPORTS], 3, name="lanes-test-jobs")
    with (
        processes.running(worker, env=env, log=tmp_path / "worker.log"),
        processes.running(jobs, env=env, log=tmp_path / "jobs.log"),
    ):
        slots = wait_until(
            lambda: (found := default_queue_slots()) and len(found) == 1 and found,
            60,
            "the worker's answer",
        )
        # Only the worker on `default` counts: the catch-up's tasks go nowhere else.
        ((name, count),) = slots.items()
        assert name.startswith("lanes-test@") and count == 2

        production.DECISIONBOARD = {**production.DECISIONBOARD, "CATCHUP_LANES": 3}
        output, error = doctor()
    assert str(error) == "1 thing to fix (see FIX)", output
    assert (
        "3 catch-up lanes (DECISIONBOARD_CATCHUP_LANES), but the workers on queue default "
        f"have 2 process slots ({name}: 2)" in output
    )
    assert "--concurrency 4" in output


def test_it_says_whether_the_otlp_grpc_receiver_answers_on_its_port(db, tmp_path):
    from tests.support.live import grpc_receiver

    with grpc_receiver(tmp_path, database_url()) as address:
        port = int(address.rsplit(":", 1)[1])
        up = otlp_grpc(port)
        assert (up.ok, up.message) == (True, f"OTLP/gRPC receiver answers on {address}")
    down = otlp_grpc(port, timeout=0.5)
    assert down.note and not down.ok
    assert down.message.startswith(f"no OTLP/gRPC receiver answers on {address}")
    assert "manage.py serve_otlp_grpc" in down.fix
    assert otlp_grpc(0).message == "OTLP/gRPC is off (DECISIONBOARD_OTLP_GRPC_PORT=0)"

"""Settings come from the environment and fail loudly on malformed values."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_int, env_rate, env_size, parse_rate


@pytest.mark.parametrize(
    ("value", "expected"), [("1", True), ("yes", True), ("off", False), ("", False)]
)
def test_it_reads_booleans(monkeypatch, value, expected):
    monkeypatch.setenv("X_FLAG", value)
    assert env_bool("X_FLAG") is expected


@pytest.mark.parametrize(
    ("reader", "value", "words"),
    [
        (lambda: env_bool("X_VAL"), "maybe", "is not a boolean"),
        (lambda: env_int("X_VAL", 1), "ten", "is not an integer"),
        (lambda: env_int("X_VAL", 1, minimum=1), "0", "is below the minimum, 1"),
        (lambda: env_size("X_VAL", "5MB"), "five megs", "is not a size"),
        (lambda: env_rate("X_VAL", "1/s"), "fast", "is not a rate"),
    ],
)
def test_it_names_the_variable_of_a_malformed_setting(monkeypatch, reader, value, words):
    monkeypatch.setenv("X_VAL", value)
    with pytest.raises(ImproperlyConfigured, match=f"X_VAL={value!r} {words}"):
        reader()


def test_it_parses_rates_and_sizes(monkeypatch):
    assert parse_rate("1000/s") == (1000, 1)
    assert parse_rate("600/5min") == (600, 300)
    monkeypatch.setenv("X_SIZE", "256KB")
    assert env_size("X_SIZE", "1") == 262144


def _settings_in_subprocess(**env) -> subprocess.CompletedProcess:
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings'; "
        "django.setup(); from django.conf import settings as s; "
        "print(s.DATABASES['default']['ENGINE'], s.DEBUG, s.CELERY_BROKER_URL.split(':')[0], "
        "getattr(s, 'CELERY_BROKER_TRANSPORT', '-'))"
    )
    full_env = {
        k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DEBUG")
    }
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-c", code], env=full_env, capture_output=True, text=True
    )


def test_it_defaults_to_sqlite_the_filesystem_broker_and_debug_off(tmp_path):
    out = _settings_in_subprocess(DECISIONBOARD_VAR_DIR=str(tmp_path))
    assert out.stdout.split() == [
        "django.db.backends.sqlite3",
        "False",
        "filesystem",
        "workers.broker:Transport",  # kombu's, made safe against half-written messages
    ], out.stderr


def test_it_switches_to_postgresql_and_redis_from_the_environment(tmp_path):
    out = _settings_in_subprocess(
        DECISIONBOARD_VAR_DIR=str(tmp_path),
        DATABASE_URL="postgres://u@db:5432/x",
        REDIS_URL="redis://cache:6379/0",
        DEBUG="1",
    )
    assert out.stdout.split() == ["django.db.backends.postgresql", "True", "redis", "-"], out.stderr


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"DATABASE_URL": "mysql://u@h/db"}, "Decisionboard runs on PostgreSQL or SQLite"),
        ({"DATABASE_URL": "nonsense"}, "DATABASE_URL"),
        ({"DEBUG": "sometimes"}, "DEBUG='sometimes' is not a boolean"),
        ({"DECISIONBOARD_INGEST_MAX_BODY": "big"}, "DECISIONBOARD_INGEST_MAX_BODY"),
        ({"DATABASE_POOLER": "statement"}, "DATABASE_POOLER='statement' is not one of"),
        ({"DATABASE_REPLICA_URL": "postgres://u@r/x"}, "needs DATABASE_URL on PostgreSQL"),
        (
            {"DATABASE_URL": "postgres://u@db/x", "DATABASE_REPLICA_URL": "mysql://u@r/x"},
            "DATABASE_REPLICA_URL names",
        ),
    ],
)
def test_it_refuses_to_start_on_a_malformed_setting(tmp_path, env, words):
    out = _settings_in_subprocess(DECISIONBOARD_VAR_DIR=str(tmp_path), **env)
    assert out.returncode != 0
    assert "ImproperlyConfigured" in out.stderr and words in out.stderr


_DATABASES = (
    "import django, json, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings'; "
    "django.setup(); from django.conf import settings as s; "
    "print(json.dumps({'aliases': {a: [d['HOST'], d['OPTIONS'].get('options', ''), "
    "d['TEST'].get('MIRROR')] for a, d in s.DATABASES.items()}, "
    "'routers': s.DATABASE_ROUTERS}))"
)


def _databases(tmp_path, **env) -> dict:
    full_env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    full_env.update(DECISIONBOARD_VAR_DIR=str(tmp_path), **env)
    out = subprocess.run(
        [sys.executable, "-c", _DATABASES], env=full_env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_each_replica_url_is_an_alias_read_through_the_router(tmp_path):
    found = _databases(
        tmp_path,
        DATABASE_URL="postgres://u@primary/x",
        DATABASE_REPLICA_URL="postgres://u@standby-1/x, postgres://u@standby-2/x",
    )
    assert found["aliases"] == {
        "default": ["primary", "-c jit=off", None],
        # The tests never make databases for them: they read the test database.
        "replica1": ["standby-1", "-c jit=off", "default"],
        "replica2": ["standby-2", "-c jit=off", "default"],
    }
    assert found["routers"] == ["config.replicas.ReadReplicaRouter"]


def test_behind_a_transaction_pooler_no_startup_options_are_sent(tmp_path):
    # PgBouncer refuses the `options` startup parameter; jit=off is the role's default instead.
    found = _databases(
        tmp_path, DATABASE_URL="postgres://u@pgbouncer/x", DATABASE_POOLER="transaction"
    )
    assert found["aliases"] == {"default": ["pgbouncer", "", None]}
    assert found["routers"] == []


_SQLITE_CONNECTION = (
    "import django, json, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings'; "
    "django.setup(); from django.db import connection as c; cur = c.cursor(); "
    "print(json.dumps({'journal_mode': cur.execute('PRAGMA journal_mode').fetchone()[0], "
    "'busy_timeout': cur.execute('PRAGMA busy_timeout').fetchone()[0], "
    "'transaction_mode': c.transaction_mode, 'name': str(c.settings_dict['NAME'])}))"
)


@pytest.mark.parametrize("through_url", [False, True])
def test_sqlite_through_database_url_is_opened_like_the_embedded_default(tmp_path, through_url):
    # WAL (readers alongside a writer), IMMEDIATE transactions (writers queue instead of failing
    # at once with "database is locked") and a 30 s busy timeout, whichever way SQLite is named.
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["DECISIONBOARD_VAR_DIR"] = str(tmp_path)
    if through_url:
        env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'elsewhere.sqlite3'}"
    out = subprocess.run(
        [sys.executable, "-c", _SQLITE_CONNECTION], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    opened = json.loads(out.stdout)
    assert opened["journal_mode"] == "wal"
    assert opened["busy_timeout"] == 30_000
    assert opened["transaction_mode"] == "IMMEDIATE"
    assert opened["name"].endswith("elsewhere.sqlite3" if through_url else "decisionboard.sqlite3")


def test_postgresql_connections_run_without_jit(postgres):
    # PostgreSQL compiles any query whose estimate passes jit_above_cost, and without statistics
    # the streak recompute's did: 0.69 s of its 1.46 s (config.settings).
    with postgres.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone() == ("off",)


_POSTGRES_CONNECTION = (
    "import django, json, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings'; "
    "django.setup(); from django.db import connection as c; cur = c.cursor(); "
    "cur.execute('SHOW jit'); jit = cur.fetchone()[0]; "
    "cur.execute('SHOW statement_timeout'); print(json.dumps([jit, cur.fetchone()[0]]))"
)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ("", ["off", "0"]),
        ("-c statement_timeout=5000", ["off", "5s"]),  # the URL's options are kept
        ("-c jit=on", ["on", "0"]),  # and an operator's own jit wins
    ],
)
def test_the_urls_own_startup_options_are_kept(postgres, options, expected):
    from urllib.parse import quote

    from tests.support.services import database_url

    base = database_url().partition("?")[0]  # without the suite's own startup options
    url = base + (f"?options={quote(options)}" if options else "")
    env = {**os.environ, "DATABASE_URL": url}
    out = subprocess.run(
        [sys.executable, "-c", _POSTGRES_CONNECTION], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == expected


def test_processes_starting_at_once_agree_on_one_generated_secret_key(tmp_path):
    """Without SECRET_KEY, the key is made once per var folder; gunicorn's workers import the
    settings at the same moment, and none may read the file empty or half written."""
    # Each process loads what the settings import first, then all read them at one moment.
    code = (
        "import sys, time, django, config.env; "
        "time.sleep(max(0.0, float(sys.argv[1]) - time.time())); "
        "import config.settings as s; print(s.SECRET_KEY)"
    )
    for first_start in range(3):  # the moment is a race: three first starts, each its folder
        folder = tmp_path / str(first_start)
        at = str(time.time() + 3)
        env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DATABASE_URL")}
        env["DECISIONBOARD_VAR_DIR"] = str(folder)
        starts = [
            subprocess.Popen(
                [sys.executable, "-c", code, at], env=env, stdout=subprocess.PIPE, text=True,
                cwd=Path(__file__).resolve().parents[2],
            )
            for _ in range(24)
        ]  # fmt: skip
        keys = {process.communicate(timeout=120)[0].strip() for process in starts}
        assert len(keys) == 1 and len(keys.pop()) > 40
        assert [p.name for p in folder.iterdir() if "secret" in p.name] == ["secret_key"]

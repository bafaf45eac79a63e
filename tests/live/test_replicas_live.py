"""Pages and the read API on a streaming standby (DATABASE_REPLICA_URL), for real.

A private PostgreSQL primary and a standby made from it with pg_basebackup -R, both logging
every statement, so that the test reads in their logs which one answered. The product's web
server is given the standby as its replica: what a user must see is the same answers as from
the primary, the standby's delay counted in the freshness, one's own write on the next read,
and the primary taking over, without an error, when the standby is stopped or too far behind.
Statement by statement, request by request: what of a read reaches the primary (docs/scaling.md).
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import requests

from config.replicas import PIN_COOKIE
from tests.support import rollup_data
from tests.support.alert_flow import ALERT_RULE
from tests.support.live import PrivateCluster, private_cluster, wait_until
from tests.support.standby import manage, metric, post_records, product_env, set_up
from workers import processes

MAX_LAG = 5  # DECISIONBOARD_REPLICA_MAX_LAG_SECONDS for the test


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
            f"{base}/api/v1/alert-rules", json=ALERT_RULE,
            headers={"Authorization": f"Bearer {key}"}, timeout=30,
        )  # fmt: skip
        assert created.status_code == 201, created.text
        assert PIN_COOKIE in created.cookies
        # One's own write is read back (pinned to the primary's position by a cookie)...
        assert rule_names(base, key, writer) == [ALERT_RULE["name"]]
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
        assert rule_names(base, key) == [ALERT_RULE["name"]]
        caught_up = metric(base, key)["freshness"]
        assert caught_up["lag_seconds"] < 1.0, caught_up
        assert "records_rollup" not in standby.log_text()[standby_mark:]

        # Replaying again, the standby is read again; stopped, the primary answers, no error.
        standby.execute("postgres", "SELECT pg_wal_replay_resume()")
        wait_until(lambda: replayed(primary, standby), 30, "the standby to replay")
        time.sleep(1.2)  # the web process's view of the standby's health is a second old
        standby_mark = len(standby.log_text())
        assert rule_names(base, key) == [ALERT_RULE["name"]]
        assert "alerts_" in standby.log_text()[standby_mark:]
        standby.stop("fast")
        assert 'decisionboard_replica_up{replica="replica1"} 0.0' in scrape(base)
        assert operator.get(f"{base}/", timeout=30).status_code == 200
        assert operator.get(f"{base}/runs/", timeout=30).status_code == 200
        assert sum(t["value"] for t in metric(base, key)["totals"]) == len(records)
        assert rule_names(base, key) == [ALERT_RULE["name"]]


# Each server logs every statement with the name of the connection's application first: the
# product's web process is decisionboard@<DECISIONBOARD_HOSTNAME>, the test's own connections
# have none.
LINE_PREFIX = "log_line_prefix='%a|'"
WEB_APP = "decisionboard@web"
KEY_CACHE = 2  # DECISIONBOARD_API_KEY_CACHE_SECONDS for the test
_MESSAGE = re.compile(r"^[^|\s]*\|[A-Z]+:  ")
_READ_FROM = re.compile(r'^SELECT .*? FROM "(\w+)"')
_STATEMENT = re.compile(r"^(?P<app>[^|\s]*)\|LOG:  (?:statement|execute [^:]*): ")


class StatementLog:
    """The statements a server logged (log_statement=all, LINE_PREFIX) since the last `take`,
    by the product's web process."""

    def __init__(self, cluster: PrivateCluster) -> None:
        self.path = cluster.root / "log"
        self.offset = self.path.stat().st_size

    def take(self) -> list[str]:
        with self.path.open("rb") as log:
            log.seek(self.offset)
            text = log.read().decode(errors="replace")
        self.offset += len(text.encode(errors="replace"))
        found: list[list[str]] = []
        current: list[str] | None = None
        for line in text.splitlines():
            statement = _STATEMENT.match(line)
            if statement:
                current = [line[statement.end() :]] if statement["app"] == WEB_APP else None
                if current is not None:
                    found.append(current)
            elif _MESSAGE.match(line):
                current = None
            elif current is not None:
                current.append(line.strip())
        return [" ".join(parts) for parts in found]


def read_key(env: dict, project: str) -> str:
    code = (
        "from records.models import ApiKey, Project\n"
        f"print(ApiKey.issue(Project.objects.get(name={project!r}), ApiKey.Scope.READ)[1])"
    )
    return manage(env, "shell", "-c", code).split()[-1]


def test_reads_leave_the_primary_only_the_key_and_the_session(tmp_path):
    with private_cluster("log_statement=all", LINE_PREFIX) as primary:
        standby_root = Path(tempfile.mkdtemp(prefix="decisionboard-standby-"))
        env = product_env(primary.url("decisionboard"), tmp_path)
        (key,) = set_up(env, ["acme"])
        reader = read_key(env, "acme")
        standby = primary.standby(standby_root, processes.free_port())
        try:
            standby.start("log_statement=all", LINE_PREFIX)
            _check_where_reads_go(primary, standby, env, key, reader, tmp_path)
        finally:
            if standby.data.exists() and standby.running():
                standby.stop("immediate")
            shutil.rmtree(standby_root, ignore_errors=True)


def _check_where_reads_go(primary, standby, env, key, reader, tmp_path):
    env.update(
        DATABASE_REPLICA_URL=standby.url("decisionboard"),
        DECISIONBOARD_NUDGE_WORKERS="0",
        DECISIONBOARD_API_KEY_CACHE_SECONDS=str(KEY_CACHE),
    )
    port = processes.free_port()
    base = f"http://127.0.0.1:{port}"
    records = rollup_data.build(200)
    web_env = {**env, "DECISIONBOARD_HOSTNAME": "web"}
    with processes.running(
        processes.web_command(f"127.0.0.1:{port}", 1), env=web_env, log=tmp_path / "web.log"
    ):
        wait_until(lambda: requests.get(f"{base}/accounts/login/", timeout=5).ok, 60, "web")
        post_records(base, key, records)
        manage(env, "shell", "-c", "from records import catchup; catchup.catch_up()")
        operator = log_in(base)
        wait_until(lambda: replayed(primary, standby), 30, "the standby to replay")
        on_primary, on_standby = StatementLog(primary), StatementLog(standby)

        # The read API with a read key: every data read on the standby; on the primary, the
        # key's lookup (which marks its use) once per cache life of the process, nothing else.
        now = datetime.now(UTC)
        endpoints = [
            ("/api/v1/records", {"limit": 20}, "records_record"),
            ("/api/v1/runs", {}, "records_run"),
            ("/api/v1/metrics/records",
             {"from": "2026-11-19T00:00:00Z", "to": (now + timedelta(hours=1)).isoformat(),
              "interval": "day"}, "records_rollup"),
        ]  # fmt: skip
        (first_use,) = primary.execute("postgres", "SELECT now()")[0]
        started = time.monotonic()
        lookups = 0
        for i in range(45):
            path, params, table = endpoints[i % len(endpoints)]
            answer = requests.get(
                f"{base}{path}", params=params, headers={"Authorization": f"Bearer {reader}"},
                timeout=30,
            )  # fmt: skip
            assert answer.status_code == 200, (path, answer.text)
            primary_sql, standby_sql = on_primary.take(), on_standby.take()
            if primary_sql:
                lookups += 1
                # A kept connection's health check, then one statement that reads the key and
                # marks its use: no data read, and no second round trip for the mark.
                *checks, lookup = primary_sql
                assert checks in ([], ["SELECT 1"]) and '"records_apikey"' in lookup, primary_sql
            assert any(re.search(rf"\b{table}\b", sql) for sql in standby_sql), path
            if i == 0:
                (first_answered,) = primary.execute("postgres", "SELECT now()")[0]
            time.sleep(0.1)
        lives = (time.monotonic() - started) / KEY_CACHE
        assert lives > 2
        assert 1 <= lookups <= lives + 1, (lookups, lives)
        # The use was marked by the first request, and not again by the lookups of the following
        # cache lives: the mark is at most once a minute.
        (last_used,) = primary.execute(
            "decisionboard", "SELECT last_used_at FROM records_apikey WHERE scope = 'read'"
        )[0]
        assert first_use <= last_used <= first_answered, (first_use, last_used, first_answered)

        # Pages, logged in: every data read on the standby; on the primary, the session and its
        # user, once each per request (a session or a user made a moment ago must be found).
        pages = [("/", "records_rollup"), ("/runs/", "records_run"), ("/models/", "records_rollup")]
        for i in range(12):
            path, table = pages[i % len(pages)]
            assert operator.get(f"{base}{path}", timeout=30).status_code == 200, path
            primary_sql, standby_sql = on_primary.take(), on_standby.take()
            # The kept connection's health check (CONN_HEALTH_CHECKS), then reads only.
            checks = primary_sql[:1] if primary_sql[:1] == ["SELECT 1"] else []
            reads = primary_sql[len(checks) :]
            tables = [m[1] for sql in reads if (m := _READ_FROM.match(sql))]
            assert len(tables) == len(reads), primary_sql
            # The overview's worker status is judged against the clock: read where the
            # heartbeats are written, never seconds behind.
            beats = ["workers_heartbeat"] if path == "/" else []
            assert tables == ["django_session", "auth_user", *beats], primary_sql
            assert any(re.search(rf"\b{table}\b", sql) for sql in standby_sql), path

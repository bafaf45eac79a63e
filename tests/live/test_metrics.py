"""/metrics: Prometheus's text format, behind a token, moving with what the product does.

Each test scrapes before and after some activity and checks the difference, parsed with
prometheus-client's own parser: the counters live in the machine's metrics folder, which keeps
every process's counts (this test process's included) across runs.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from datetime import timedelta

import pytest
import requests
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from kombu import Connection

from alerts.models import Rule
from config.queues import Queue
from ops import multiprocess
from records import catchup
from records.models import ApiKey, Project
from tests.support.factories import DATA, record
from tests.support.live import STARTUP_SECONDS, wait_until
from tests.support.metrics_scrape import TOKEN, families, parse, value
from tests.support.otlp_payloads import chat, export, json_string_form, span
from tests.support.services import database_url
from workers import heartbeat, processes
from workers.models import ExportJob
from workers.tasks import catch_up_task, evaluate_alerts_task, heartbeat_task

RECORDS = "decisionboard_ingest_records_total"


@pytest.fixture
def metrics_on(settings):
    settings.DECISIONBOARD = {**settings.DECISIONBOARD, "METRICS_TOKEN": TOKEN}


def scrape() -> dict:
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    return parse(response.content.decode())


def post(persona, records: list[dict]):
    response = persona.client().post("/api/v1/records", {"records": records}, format="json")
    assert response.status_code in (200, 207), response.content
    return response.json()


def ingested(before: dict, after: dict, project: str, kind: str, outcome: str, via="api") -> float:
    labels = {"project": project, "kind": kind, "outcome": outcome, "via": via}
    return value(after, RECORDS, **labels) - value(before, RECORDS, **labels)


def test_it_is_off_unless_a_token_is_set(db, client):
    assert client.get("/metrics").status_code == 404


def test_it_asks_for_the_token(metrics_on, client):
    missing = client.get("/metrics")
    assert missing.status_code == 401
    assert missing["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Basic {TOKEN}").status_code == 401


@pytest.mark.both_dbs
def test_it_counts_posted_records_by_project_kind_and_outcome(alice, bob, metrics_on):
    before = scrape()
    pick = record("tool_choice.pick", id="p1")
    answer = post(alice, [
        pick,
        record("tool_choice.pick", id="p2"),
        record("model_selection", id="s1"),
        pick,  # repeated in its batch
        record("tool_choice.pick", id="p3", data={**DATA["tool_choice.pick"], "confidence": "x"}),
        {**record("turn"), "kind": "no.such.kind"},
    ])  # fmt: skip
    assert (answer["accepted"], answer["duplicates"], len(answer["rejected"])) == (3, 1, 2)
    post(alice, [record("model_selection", id="s1")])  # stored before
    post(bob, [record("turn", id="t1")])
    after = scrape()

    assert ingested(before, after, "acme", "tool_choice.pick", "accepted") == 2
    assert ingested(before, after, "acme", "model_selection", "accepted") == 1
    assert ingested(before, after, "acme", "tool_choice.pick", "duplicate") == 1
    assert ingested(before, after, "acme", "model_selection", "duplicate") == 1
    assert ingested(before, after, "acme", "tool_choice.pick", "rejected") == 1
    # A kind nobody declared is counted, under a name the client cannot choose.
    assert ingested(before, after, "acme", "unknown", "rejected") == 1
    assert ingested(before, after, "globex", "turn", "accepted") == 1
    assert ingested(before, after, "globex", "tool_choice.pick", "accepted") == 0


@pytest.mark.both_dbs
def test_it_tells_which_kinds_of_a_mixed_batch_were_stored_before(alice, metrics_on):
    post(alice, [record("tool_choice.pick", id="p1"), record("model_selection", id="s1")])
    before = scrape()
    post(alice, [
        record("tool_choice.pick", id="p1"),  # stored before
        record("tool_choice.pick", id="p2"),
        record("model_selection", id="s2"),
        record("turn", id="t1"),
    ])  # fmt: skip
    after = scrape()
    assert ingested(before, after, "acme", "tool_choice.pick", "duplicate") == 1
    assert ingested(before, after, "acme", "tool_choice.pick", "accepted") == 1
    assert ingested(before, after, "acme", "model_selection", "accepted") == 1
    assert ingested(before, after, "acme", "model_selection", "duplicate") == 0
    assert ingested(before, after, "acme", "turn", "accepted") == 1


@pytest.mark.both_dbs
def test_counting_a_batch_by_kind_costs_no_query_of_its_own(alice, metrics_on):
    # The store says how many of each kind it took as new, so a mixed batch partly stored
    # before is counted without asking the database which of its records those were.
    post(alice, [record("tool_choice.pick", id="p1"), record("model_selection", id="s1")])
    with CaptureQueriesContext(connection) as fresh:
        post(alice, [record("tool_choice.pick", id="p2"), record("model_selection", id="s2")])
    fresh_queries = len(fresh)  # read now: the next request empties Django's query log
    before = scrape()
    with CaptureQueriesContext(connection) as mixed:
        post(alice, [record("tool_choice.pick", id="p1"), record("model_selection", id="s3")])
    # PostgreSQL stores a batch holding a resend again, after a savepoint (records.store.writer).
    mixed_queries = sum("ROLLBACK TO SAVEPOINT" not in query["sql"] for query in mixed)
    after = scrape()
    assert mixed_queries == fresh_queries > 0
    assert ingested(before, after, "acme", "tool_choice.pick", "duplicate") == 1
    assert ingested(before, after, "acme", "model_selection", "accepted") == 1


def test_it_counts_otlp_records_and_rejected_spans(alice, metrics_on):
    bad_pick = {**json_string_form(DATA["tool_choice.pick"]), "confidence": "high"}
    request = export(
        span("chat", chat()),
        span("GET /health"),
        span("pick", events=[("decisionboard.tool_choice.pick", bad_pick)]),
    )
    before = scrape()
    response = alice.client().post(
        "/v1/traces", request.SerializeToString(), content_type="application/x-protobuf"
    )
    assert response.status_code == 200
    after = scrape()
    assert ingested(before, after, "acme", "model_call", "accepted", via="otlp") == 1
    assert ingested(before, after, "acme", "tool_choice.pick", "rejected", via="otlp") == 1
    spans = "decisionboard_otlp_rejected_spans_total"
    assert value(after, spans, project="acme") - value(before, spans, project="acme") == 2


def test_it_counts_what_each_alert_tick_evaluated_and_recorded(alice, metrics_on):
    rule = {"comparator": "lt", "metric": "records", "window_minutes": 5, "group_by": ""}
    Rule.objects.create(project=alice.project, name="silent", threshold=1, **rule)  # 0 < 1
    Rule.objects.create(project=alice.project, name="quiet", threshold=0, **rule)
    before = scrape()
    evaluate_alerts_task.apply()
    after = scrape()

    def moved(name: str, **labels) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("decisionboard_alert_rules_evaluated_total", outcome="ok") == 2
    assert moved("decisionboard_alert_rules_evaluated_total", outcome="error") == 0
    assert moved("decisionboard_alert_events_total") == 1  # "silent" fires
    assert moved("decisionboard_alert_notifications_enqueued_total") == 0  # no channel
    ticks = "decisionboard_task_duration_seconds_count"
    assert moved(ticks, task="evaluate_alerts", state="success") == 1


def test_it_times_requests_by_route_never_by_path(alice, metrics_on):
    post(alice, [record(run_id="run-secret-1")])
    before = scrape()
    for run_id in ("run-secret-1", "run-secret-2"):
        alice.client(alice.read_key).get(f"/api/v1/runs/{run_id}")
    after = scrape()
    count = "decisionboard_http_request_duration_seconds_count"
    route = "/api/v1/runs/<path:run_id>"
    found = value(after, count, method="GET", route=route, status="200") - value(
        before, count, method="GET", route=route, status="200"
    )
    missing = value(after, count, method="GET", route=route, status="404") - value(
        before, count, method="GET", route=route, status="404"
    )
    assert (found, missing) == (1, 1)
    assert not any("run-secret" in str(labels) for _name, labels in after)


@pytest.mark.both_dbs
def test_it_reports_the_catch_up_backlog_and_lag(alice, metrics_on):
    post(alice, [record(ts="2026-11-20T09:30:00Z") for _ in range(3)])
    waiting = scrape()
    assert value(waiting, "decisionboard_catchup_pending_records") == 3
    assert value(waiting, "decisionboard_catchup_lag_seconds") >= 0
    assert value(waiting, "decisionboard_catchup_last_pass_age_seconds") == math.inf
    catchup.catch_up()
    done = scrape()
    assert value(done, "decisionboard_catchup_pending_records") == 0
    assert value(done, "decisionboard_catchup_lag_seconds") == 0
    assert 0 <= value(done, "decisionboard_catchup_last_pass_age_seconds") < 60
    moved = value(done, "decisionboard_catchup_watermark_id") - value(
        waiting, "decisionboard_catchup_watermark_id"
    )
    assert moved >= 3


def test_it_reports_each_queues_heartbeat_age(db, metrics_on):
    heartbeat.beat(Queue.DEFAULT, timezone.now() - timedelta(seconds=30))
    samples = scrape()
    age = "decisionboard_heartbeat_age_seconds"
    assert 30 <= value(samples, age, queue="default") < 60
    assert value(samples, age, queue="notifications") == math.inf
    assert value(samples, age, queue="exports") == math.inf


def test_it_times_celery_tasks_by_name_and_state(db, metrics_on):
    count = "decisionboard_task_duration_seconds_count"
    before = scrape()
    heartbeat_task.apply(args=("exports",))
    catch_up_task.apply()
    after = scrape()
    for task in ("heartbeat", "catch_up"):
        labels = {"task": task, "state": "success"}
        assert value(after, count, **labels) - value(before, count, **labels) == 1


def test_it_reports_export_jobs_by_status(alice, metrics_on):
    for status in ("queued", "queued", "running", "done"):
        ExportJob.objects.create(project=alice.project, format="csv", status=status)
    samples = scrape()
    jobs = "decisionboard_export_jobs"
    assert [value(samples, jobs, status=s) for s in ("queued", "running", "done", "failed")] == [
        2, 1, 1, 0,
    ]  # fmt: skip


def _purge(connection: Connection) -> None:
    for queue in Queue:
        connection.default_channel.queue_purge(queue.value)


@pytest.mark.services
def test_it_reports_redis_queue_depths(db, metrics_on, settings):
    from tests.support.services import need_service

    need_service(bool(settings.REDIS_URL), "Redis (set REDIS_URL)")
    with Connection(settings.REDIS_URL) as connection:
        _purge(connection)
        try:
            for queue, n in ((Queue.EXPORTS, 2), (Queue.NOTIFICATIONS, 1)):
                simple = connection.SimpleQueue(queue.value)
                for _ in range(n):
                    simple.put({"test": True})
            samples = scrape()
        finally:
            _purge(connection)
    depth = "decisionboard_queue_depth"
    assert [value(samples, depth, queue=q) for q in ("default", "notifications", "exports")] == [
        0, 1, 2,
    ]  # fmt: skip
    assert value(samples, "decisionboard_broker_up") == 1


def test_it_reports_filesystem_queue_depths(db, metrics_on, settings, tmp_path):
    options = {
        **settings.CELERY_BROKER_TRANSPORT_OPTIONS,
        "data_folder_in": str(tmp_path),
        "data_folder_out": str(tmp_path),
        "processed_folder": str(tmp_path / "processed"),
        "control_folder": str(tmp_path / "control"),
    }
    settings.REDIS_URL = None
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = options
    with Connection("filesystem://", transport="workers.broker:Transport",
                    transport_options=options) as connection:  # fmt: skip
        # The channel's own put, as a routed publish ends; declaring a queue here would leave
        # its binding in kombu's process-wide state, pointing other tests' queues elsewhere.
        for _ in range(3):
            connection.default_channel._put(Queue.DEFAULT.value, {"test": True})
    samples = scrape()
    assert value(samples, "decisionboard_queue_depth", queue="default") == 3
    assert value(samples, "decisionboard_queue_depth", queue="exports") == 0


def test_it_still_answers_when_the_broker_is_down(db, metrics_on, settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{processes.free_port()}/0"
    samples = scrape()
    assert value(samples, "decisionboard_broker_up") == 0
    assert value(samples, "decisionboard_database_up") == 1
    assert not any(name == "decisionboard_queue_depth" for name, _labels in samples)


_COUNTING_PROCESS = """
from prometheus_client import Counter, Histogram
Counter("jobs", "", ["kind"]).labels("a").inc({n})
Histogram("seconds", "", buckets=(1, 10)).observe({n})
"""


def test_it_sums_processes_and_keeps_the_counts_of_those_that_exited(tmp_path):
    for n in (3, 4):
        env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(tmp_path))
        subprocess.run([sys.executable, "-c", _COUNTING_PROCESS.format(n=n)], env=env,
                       check=True, timeout=60)  # fmt: skip
    assert len(multiprocess.process_files(tmp_path)) == 2
    for _ in range(2):  # the first collect folds the exited processes' files; the next reads that
        text = "\n".join(_exposition(multiprocess.collect(tmp_path)))
        samples = parse(text)
        assert value(samples, "jobs_total", kind="a") == 7
        assert value(samples, "seconds_bucket", le="1.0") == 0
        assert value(samples, "seconds_bucket", le="10.0") == 2
        assert value(samples, "seconds_count") == 2 and value(samples, "seconds_sum") == 7
    assert multiprocess.process_files(tmp_path) == {}
    assert sorted(p.name for p in tmp_path.glob("*.db")) == [
        "counter_archive.db", "histogram_archive.db",
    ]  # fmt: skip


def _exposition(metrics) -> list[str]:
    from prometheus_client import CollectorRegistry, generate_latest

    class Fixed:
        def collect(self):
            return metrics

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed())
    return [generate_latest(registry).decode()]


# gunicorn's master as it runs child_exit: from its SIGCHLD handler, which the exit of a second
# worker may interrupt. Here the second exit's signal arrives while the fold of the first reads
# its file, with the folder's lock held.
_MASTER_FOLDING = """
import os, runpy, signal, types
from prometheus_client.mmap_dict import MmapedDict

conf = runpy.run_path("gunicorn.conf.py")
first, second = {first}, {second}
exits = lambda *_: conf["child_exit"](None, types.SimpleNamespace(pid=second))
signal.signal(signal.SIGUSR1, exits)
read = MmapedDict.read_all_values_from_file

def reading(filename):
    if filename.endswith(f"_{{first}}.db"):
        os.kill(os.getpid(), signal.SIGUSR1)
    return read(filename)

MmapedDict.read_all_values_from_file = staticmethod(reading)
conf["child_exit"](None, types.SimpleNamespace(pid=first))
"""


def test_a_worker_exit_that_interrupts_the_fold_of_another_is_folded_too(tmp_path):
    """Two gunicorn workers replaced at once: the master, its fold of the first interrupted by
    the second's exit, folds both and goes on (it used to wait forever on its own lock)."""
    pids = []
    for n in (3, 4):
        env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(tmp_path))
        pids.append(int(subprocess.run(
            [sys.executable, "-c", _COUNTING_PROCESS.format(n=n) + "import os; print(os.getpid())"],
            env=env, check=True, timeout=60, capture_output=True, text=True,
        ).stdout))  # fmt: skip
    env = dict(os.environ, DECISIONBOARD_METRICS_DIR=str(tmp_path))
    subprocess.run([sys.executable, "-c", _MASTER_FOLDING.format(first=pids[0], second=pids[1])],
                   cwd=processes.BASE_DIR, env=env, check=True, timeout=30)  # fmt: skip
    assert multiprocess.process_files(tmp_path) == {}
    samples = parse("\n".join(_exposition(multiprocess.collect(tmp_path))))
    assert value(samples, "jobs_total", kind="a") == 7
    assert value(samples, "seconds_count") == 2 and value(samples, "seconds_sum") == 7


def test_gunicorn_processes_count_into_one_sum_across_restarts(tmp_path, transactional_db):
    """Two gunicorn processes, each replaced after a few requests: /metrics, whichever process
    answers, counts every record posted, and the folder keeps one file per live process."""
    key = ApiKey.issue(Project.objects.create(name="acme"), ApiKey.Scope.INGEST)[1]
    port = processes.free_port()
    env = dict(
        os.environ,
        DATABASE_URL=database_url(),
        DECISIONBOARD_VAR_DIR=str(tmp_path),
        DECISIONBOARD_NUDGE_WORKERS="0",
        DECISIONBOARD_METRICS_TOKEN=TOKEN,
        DECISIONBOARD_WEB_MAX_REQUESTS="3",
    )
    base = f"http://127.0.0.1:{port}"
    with processes.running(
        processes.web_command(f"127.0.0.1:{port}", 2), env=env, log=tmp_path / "web.log"
    ):
        wait_until(
            lambda: requests.get(f"{base}/healthz", timeout=5).ok, STARTUP_SECONDS, "gunicorn"
        )
        for i in range(12):
            batch = {"records": [record("turn", id=f"t{i}")]}
            # A gthread worker that leaves after max_requests resets the connections it had
            # accepted and not yet read; a client sends the batch again, which record ids make
            # safe (a batch stored twice counts once as accepted, once as a duplicate).
            # A request that hangs (on a worker that is leaving, or behind a booting one on a
            # busy machine) is given up after 10 s and sent again.
            try:
                answer = wait_until(
                    lambda batch=batch: requests.post(
                        f"{base}/api/v1/records", json=batch,
                        headers={"Authorization": f"Bearer {key}"}, timeout=10,
                    ),
                    90, f"an answer to batch {i}",
                )  # fmt: skip
            except AssertionError as error:
                log = (tmp_path / "web.log").read_text()[-4000:]
                raise AssertionError(f"{error}\nweb.log ends:\n{log}") from None
            assert answer.status_code == 200
        # Before any scrape (which folds the files of exited processes itself): gunicorn's
        # master folded each replaced worker's files as it exited.
        live_processes = len(multiprocess.process_files(tmp_path / "metrics"))
        metrics = requests.get(f"{base}/metrics", headers={"Authorization": f"Bearer {TOKEN}"},
                               timeout=30)  # fmt: skip
        assert metrics.status_code == 200
        samples = parse(metrics.text)
    labels = {"project": "acme", "kind": "turn", "outcome": "accepted", "via": "api"}
    assert value(samples, RECORDS, **labels) == 12
    assert "Autorestarting worker" in (tmp_path / "web.log").read_text()
    assert live_processes <= 2
    assert {"decisionboard_ingest_records", "decisionboard_http_request_duration_seconds",
            "decisionboard_catchup_lag_seconds", "decisionboard_queue_depth",
            "decisionboard_heartbeat_age_seconds"} <= families(metrics.text)  # fmt: skip


_SEND_HEARTBEATS = (
    "from workers.tasks import heartbeat_task\nfor _ in range(3): heartbeat_task.delay('default')"
)


def test_celery_pool_processes_fold_their_counts_into_the_archive_as_they_exit(
    tmp_path, transactional_db
):
    """A worker whose pool process is replaced after every task (as max_memory_per_child
    replaces one): each task is counted once, and the folder keeps no file of a process gone."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}  # the filesystem broker
    env.update(DATABASE_URL=database_url(), DECISIONBOARD_VAR_DIR=str(tmp_path))
    worker = processes.worker_command([Queue.DEFAULT], 1, name="fold") + [
        "--max-tasks-per-child", "1",
    ]  # fmt: skip
    folder = tmp_path / "metrics"
    count = "decisionboard_task_duration_seconds_count"

    def heartbeats_counted() -> float:
        # Read as they are, without the scrape's folding of exited processes' files: what is
        # folded here, the pool processes folded themselves.
        text = "\n".join(_exposition(multiprocess.summed(folder)))
        return value(parse(text), count, task="heartbeat", state="success")

    with processes.running(worker, env=env, log=tmp_path / "worker.log"):
        subprocess.run([sys.executable, "manage.py", "shell", "-c", _SEND_HEARTBEATS],
                       cwd=processes.BASE_DIR, env=env, check=True, timeout=120)  # fmt: skip
        wait_until(lambda: heartbeats_counted() >= 3, 90, "three heartbeats run")
        assert heartbeats_counted() == 3
        assert (folder / "histogram_archive.db").exists()
        # The worker's main process and its current pool process at most: the two replaced
        # pool processes fold their files as they exit (the last may still be exiting when
        # the third heartbeat is counted).
        wait_until(lambda: len(multiprocess.process_files(folder)) <= 2, 30,
                   "the replaced pool processes fold their files")  # fmt: skip

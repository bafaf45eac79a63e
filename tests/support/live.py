"""Helpers for tests that drive the product's real processes over HTTP (test_serve,
test_worker_integration, test_queues, test_outage), and a PostgreSQL cluster of their own that
a test may stop (test_outage_live, test_probes)."""

from __future__ import annotations

import glob
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TypeVar

import grpc
import psycopg
import requests
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from tests.support.services import database_url, need_service
from workers import processes

T = TypeVar("T")
# How long a started server may take to answer: four test workers share two cores in CI, and a
# process started while the others run its imports may wait for a core for most of a minute.
STARTUP_SECONDS = 90


def wait_until(predicate: Callable[[], T], timeout: float, what: str) -> T:
    """predicate()'s first truthy value, polled for up to `timeout` s; a request that fails
    (the server not up yet, or too busy to answer in time) counts as not yet."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except requests.RequestException as error:
            value, last = None, error
        else:
            last = value
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; {_seen(last)}")


def _seen(last: object) -> str:
    """What the last poll of wait_until gave, for its failure message."""
    if isinstance(last, requests.Response):
        return f"the last answer was {last.status_code}: {last.text[:500]!r}"
    if isinstance(last, Exception):
        return f"the last poll raised {type(last).__name__}: {last}"
    return f"the last poll gave {last!r}"


def run_export_job(base: str, headers: dict, body: dict, timeout: float = 60) -> dict:
    """POST /api/v1/exports and wait for a worker to finish the job; returns it, done or
    failed."""
    created = requests.post(f"{base}/api/v1/exports", json=body, headers=headers, timeout=30)
    assert created.status_code == 201, created.text
    url = f"{base}/api/v1/exports/{created.json()['id']}"

    def finished() -> dict | None:
        job = requests.get(url, headers=headers, timeout=30).json()
        return job if job["status"] in ("done", "failed") else None

    return wait_until(finished, timeout, "the export job")


def task_received(log: Path, task: str) -> bool:
    """Whether the Celery worker that wrote `log` (loglevel INFO) received `task` of
    workers.tasks."""
    received = rf"Task workers\.tasks\.{task}\[[0-9a-f-]+\] received"
    return re.search(received, log.read_text()) is not None


@contextmanager
def web_server(
    tmp_path: Path, *, port: int | None = None, database: str | None = None
) -> Iterator[str]:
    """gunicorn (one worker) serving the product on 127.0.0.1 for the block; yields its base URL.

    The test database unless `database` names another (one that is down, say); no worker nudges.
    """
    from tests.support.services import database_url
    from workers import processes

    port = port or processes.free_port()
    env = dict(
        os.environ,
        DATABASE_URL=database or database_url(),
        DECISIONBOARD_VAR_DIR=str(tmp_path),
        DECISIONBOARD_NUDGE_WORKERS="0",
    )
    command = processes.web_command(f"127.0.0.1:{port}", 1)
    with processes.running(command, env=env, log=tmp_path / f"web-{port}.log"):
        base = f"http://127.0.0.1:{port}"
        # Any answer will do: the server is up (a database that is down is the test's business).
        wait_until(
            lambda: requests.get(f"{base}/v1/traces", timeout=10) is not None,
            STARTUP_SECONDS,
            "gunicorn",
        )
        yield base


@contextmanager
def redis_server(port: int, log: Path) -> Iterator:
    """A private redis-server on `port` for the duration of the block (a test may kill it)."""
    with processes.running(
        [
            shutil.which("redis-server"),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        env=dict(os.environ),
        log=log,
    ) as proc:
        wait_until(lambda: _ping(port), 10, "redis-server")
        yield proc


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def postgres_bin() -> Path | None:
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4])
    )
    return Path(found[-1]).parent if found else None


class PrivateCluster:
    """A PostgreSQL cluster of its own in `root`, on `port`, run by pg_ctl.

    initdb refuses to run as root: as root, the cluster belongs to the `postgres` user.
    """

    def __init__(self, bin_dir: Path, root: Path, port: int) -> None:
        self.bin, self.root, self.port = bin_dir, root, port
        self.data = root / "data"
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(root, owner.pw_uid, owner.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]

    def _run(self, *cmd: str) -> None:
        subprocess.run([*self.as_user, *cmd], check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                  "-A", "trust", "-E", "UTF8", "--no-sync")  # fmt: skip

    def start(self, *settings: str) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.root}"
            " -c shared_buffers=32MB -c max_connections=40"
        ) + "".join(f" -c {setting}" for setting in settings)
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "log"),
                  "-o", options, "-w", "-t", "60", "start")  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def running(self) -> bool:
        status = subprocess.run(
            [*self.as_user, str(self.bin / "pg_ctl"), "-D", str(self.data), "status"],
            capture_output=True,
        )
        return status.returncode == 0

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def standby(self, root: Path, port: int) -> PrivateCluster:
        """A streaming standby of this (running) cluster in `root`, on `port`: pg_basebackup -R
        writes the replication settings; not started."""
        standby = PrivateCluster(self.bin, root, port)
        self._run(str(self.bin / "pg_basebackup"), "-D", str(standby.data), "-h", "127.0.0.1",
                  "-p", str(self.port), "-U", "postgres", "-R", "-X", "stream",
                  "--checkpoint=fast", "--no-sync")  # fmt: skip
        return standby

    def log_text(self) -> str:
        return (self.root / "log").read_text(errors="replace")

    def execute(self, database: str, sql: str) -> list[tuple]:
        with psycopg.connect(self.url(database), autocommit=True) as conn:
            cursor = conn.execute(sql)
            return cursor.fetchall() if cursor.description else []


@contextmanager
def pgbouncer(cluster: PrivateCluster, database: str, *, pool_size: int = 6) -> Iterator[str]:
    """Debian's PgBouncer in transaction mode in front of `cluster`'s `database`, on a free
    port, for the block; yields its DATABASE_URL. A pool smaller than the clients, so that
    their transactions share server sessions."""

    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    need_service(os.path.exists(binary), "PgBouncer (apt-get install pgbouncer)")
    root = Path(tempfile.mkdtemp(prefix="decisionboard-pgbouncer-"))
    port = processes.free_port()
    (root / "users.txt").write_text('"postgres" ""\n')
    (root / "pgbouncer.ini").write_text(
        f"[databases]\n{database} = host=127.0.0.1 port={cluster.port} dbname={database}\n"
        f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n"
        f"unix_socket_dir =\nauth_type = trust\nauth_file = {root / 'users.txt'}\n"
        f"pool_mode = transaction\ndefault_pool_size = {pool_size}\nmax_client_conn = 200\n"
        f"logfile = {root / 'pgbouncer.log'}\npidfile = {root / 'pgbouncer.pid'}\n"
    )
    as_user: list[str] = []
    if os.geteuid() == 0:  # PgBouncer refuses to run as root
        owner = pwd.getpwnam("postgres")
        for path in (root, *root.iterdir()):
            os.chown(path, owner.pw_uid, owner.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    try:
        command = [*as_user, binary, str(root / "pgbouncer.ini")]
        with processes.running(command, env=dict(os.environ), log=root / "stdout.log"):
            url = f"postgres://postgres@127.0.0.1:{port}/{database}"
            wait_until(lambda: _connects(url), 20, "pgbouncer")
            yield url
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _connects(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False


@contextmanager
def private_cluster(*settings: str) -> Iterator[PrivateCluster]:

    bin_dir = postgres_bin()
    need_service(bin_dir is not None, "PostgreSQL server binaries (/usr/lib/postgresql/*/bin)")
    root = Path(tempfile.mkdtemp(prefix="decisionboard-pg-"))
    cluster = PrivateCluster(bin_dir, root, processes.free_port())
    try:
        cluster.init()
        cluster.start(*settings)
        with psycopg.connect(cluster.url("postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE decisionboard")
        yield cluster
    finally:
        if cluster.data.exists() and cluster.running():
            cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def product(tmp_path: Path, redis_url: str):
    """gunicorn + `celery worker --beat` on `redis_url` and the test database."""
    port = processes.free_port()
    env = dict(
        os.environ,
        DATABASE_URL=database_url(),
        REDIS_URL=redis_url,
        DECISIONBOARD_VAR_DIR=str(tmp_path),
    )
    web = processes.web_command(f"127.0.0.1:{port}", 1)
    default, jobs = processes.worker_commands(tmp_path / "beat-schedule")
    with (
        processes.running(web, env=env, log=tmp_path / "web.log"),
        processes.running(default, env=env, log=tmp_path / "worker.log"),
        processes.running(jobs, env=env, log=tmp_path / "jobs-worker.log"),
    ):
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: answers_2xx(f"{base}/accounts/login/"), STARTUP_SECONDS, "gunicorn")
        yield base


def answers_2xx(url: str) -> bool:
    """Whether `url` answers 2xx; an error status raises, so that a wait that times out names
    the status and the page's first lines rather than a bare False."""
    response = requests.get(url, timeout=10)
    if not response.ok:
        raise AssertionError(f"{response.status_code} {response.reason}: {response.text[:300]}")
    return True


@contextmanager
def grpc_receiver(tmp_path: Path, database: str, **env_extra: str):
    """`manage.py serve_otlp_grpc` on a free loopback port for the block; yields its address."""
    port = processes.free_port()
    env = dict(
        os.environ,
        DATABASE_URL=database,
        DECISIONBOARD_VAR_DIR=str(tmp_path),
        DECISIONBOARD_NUDGE_WORKERS="0",
        DECISIONBOARD_INGEST_MAX_BODY=str(GRPC_BODY_LIMIT),
        **env_extra,
    )
    command = processes.otlp_grpc_command("127.0.0.1", port, "--threads", "4")
    with processes.running(command, env=env, log=tmp_path / f"otlp-grpc-{port}.log"):
        address = f"127.0.0.1:{port}"
        with grpc.insecure_channel(address) as channel:
            grpc.channel_ready_future(channel).result(timeout=60)
        yield address


GRPC_BODY_LIMIT = 64 * 1024  # the receiver's DECISIONBOARD_INGEST_MAX_BODY in these tests


def read_api(base: str, key: str, path: str, **params) -> dict:
    """GET `path` of the read API of the product at `base` with `key`; its JSON, asserting 200."""
    response = requests.get(
        f"{base}{path}", params=params, headers={"Authorization": f"Bearer {key}"}, timeout=30
    )
    assert response.status_code == 200, response.text
    return response.json()


def page_words(html: bytes) -> str:
    """A page's text without its tags, its white space runs made one space."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html.decode()))


@contextmanager
def answers_recorded(base: str) -> Iterator[tuple[str, list[ExportTraceServiceResponse]]]:
    """A pass-through in front of /v1/traces that keeps each export's answer: the Node exporter
    only logs a partial success, and the test must see it."""
    answers: list[ExportTraceServiceResponse] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            forwarded = ("authorization", "content-type", "content-encoding")
            headers = {k: v for k, v in self.headers.items() if k.lower() in forwarded}
            upstream = requests.post(f"{base}{self.path}", data=self.body(), headers=headers,
                                     timeout=60)  # fmt: skip
            if upstream.status_code == 200:
                answers.append(ExportTraceServiceResponse.FromString(upstream.content))
            self.send_response(upstream.status_code)
            self.send_header("Content-Type", upstream.headers.get("Content-Type", ""))
            self.send_header("Content-Length", str(len(upstream.content)))
            self.end_headers()
            self.wfile.write(upstream.content)

        def body(self) -> bytes:
            if self.headers.get("Content-Length"):
                return self.rfile.read(int(self.headers["Content-Length"]))
            chunks = []
            while size := int(self.rfile.readline().strip(), 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            self.rfile.readline()
            return b"".join(chunks)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", answers
    finally:
        server.shutdown()
        server.server_close()

"""Shared pieces of the benchmarks: a scratch PostgreSQL database, processes, the COPY ceiling."""

from __future__ import annotations

import os
import signal
import socket
import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from workers.processes import free_port, running, stop_leftovers, web_command

ROOT = Path(__file__).resolve().parent.parent
ADMIN_URL = os.environ.get(
    "BENCH_ADMIN_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"
)


def exit_on_signals() -> None:
    """Make SIGTERM, SIGHUP and SIGINT (a `kill`, a closed terminal, Ctrl-C, `timeout`) end the
    benchmark through its cleanup, so that its gunicorn and Celery children do not outlive it.

    The first signal raises SystemExit in this process: the `with` blocks stop the children
    they started, and workers.processes stops at exit whatever is left. A second signal during
    that cleanup kills what is left at once. Processes forked from this one (client pools,
    pollers) inherit the handler; in them the signal does what it would have done.
    """
    main = os.getpid()
    signalled = False

    def handle(signum: int, frame) -> None:
        nonlocal signalled
        if os.getpid() != main:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if signalled:
            stop_leftovers(timeout=0)
            os._exit(128 + signum)
        signalled = True
        raise SystemExit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, handle)


def setup_django(name: str, redis_url: str | None = None) -> str:
    """Recreate the scratch database `name`, point Django at it, migrate; returns its URL."""
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    url = urlunsplit(urlsplit(ADMIN_URL)._replace(path=f"/{name}"))
    os.environ["DATABASE_URL"] = url
    if redis_url:
        os.environ["REDIS_URL"] = redis_url
    else:
        os.environ.pop("REDIS_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return url


def wait_for_port(port: int, proc, what: str, seconds: float) -> None:
    """Until a process started for the bench accepts connections on `port` (RuntimeError if it
    exits or `seconds` pass first)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(0.2)


@contextmanager
def gunicorn(workers: int = 2, log: Path | None = None, timeout: int = 300):
    """The web app under gunicorn on a free port; yields (port, the master process) once it
    accepts connections."""
    port = free_port()
    cmd = web_command(
        f"127.0.0.1:{port}", workers, "--log-level", "warning", "--timeout", str(timeout)
    )
    with running(cmd, env=dict(os.environ), log=log, timeout=30) as proc:
        wait_for_port(port, proc, "gunicorn", 30)
        wait_for_workers(proc, workers, 60)
        yield port, proc


def wait_for_workers(master, count: int, seconds: float) -> None:
    """Until gunicorn's `count` workers have booted: each has loaded the app and sits idle.

    The master opens the port before its workers load the app, and a worker takes the
    connections that arrive while it alone is up: clients that connect that early all land on
    the first worker to boot, and the others serve none of them. A worker loading the app is
    on the CPU; one waiting for connections is not, so the workers are ready once none of them
    used CPU time for a few polls in a row.
    """
    deadline = time.monotonic() + seconds
    last: dict[int, int] = {}
    quiet = 0
    while quiet < 3:
        if time.monotonic() > deadline or master.poll() is not None:
            raise RuntimeError("gunicorn's workers did not boot")
        time.sleep(0.1)
        pids = child_pids(master.pid)
        used = {pid: cpu_ticks(pid) for pid in pids}
        quiet = quiet + 1 if len(pids) >= count and used == last else 0
        last = used


def balanced_connections(port: int, master, count: int, tries: int = 50) -> list:
    """`count` keep-alive HTTP connections to gunicorn on `port`, spread evenly over its workers.

    Which worker accepts a connection is a race the kernel settles: four clients connecting at
    once land 4:0 or 3:1 more often than 2:2, and a worker left with one client idles while that
    client's batch waits on the database. A bench of N clients measures N clients spread as a
    balancer would spread them: a connection on a worker that has more than its share is closed
    and opened again until each worker holds its share.
    """
    import http.client

    workers = child_pids(master.pid)
    share = -(-count // len(workers))
    conns: list = []
    for _ in range(tries):
        while len(conns) < count:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
            conn.connect()
            conns.append(conn)
        served = _serving_workers(port, conns, workers)
        held: dict[int | None, int] = {}
        kept = []
        for conn, pid in zip(conns, served, strict=True):
            held[pid] = held.get(pid, 0) + 1
            if pid is None or held[pid] > share:
                conn.close()
            else:
                kept.append(conn)
        conns = kept
        if len(conns) == count:
            return conns
    raise RuntimeError(f"could not spread {count} connections over {len(workers)} workers")


def _serving_workers(port: int, conns: list, workers: list[int]) -> list[int | None]:
    """The worker holding the server's end of each connection (None if none has accepted it
    within a second)."""
    deadline = time.monotonic() + 1
    while True:
        # The server's end: local address the port, remote address the client's own port.
        inodes: dict[int, int] = {}
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            local, remote = fields[1], fields[2]
            if int(local.split(":")[1], 16) == port:
                inodes[int(remote.split(":")[1], 16)] = int(fields[9])
        owner: dict[int, int] = {}
        for pid in workers:
            try:
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("socket:["):
                        owner[int(target[8:-1])] = pid
            except OSError:
                continue
        served = [owner.get(inodes.get(conn.sock.getsockname()[1], -1)) for conn in conns]
        if None not in served or time.monotonic() > deadline:
            return served
        time.sleep(0.02)


def child_pids(pid: int) -> list[int]:
    """The processes `pid` has started (gunicorn's workers, for its master)."""
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def cpu_ticks(pid: int) -> int:
    """User and system CPU ticks of a process so far (0 once it has exited)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


def store_rows(project_id: int, received_at: datetime, normalised) -> list[tuple]:
    """The records table's columns for already-normalised records, for COPY (the columns the
    store writes, records.store.writer.COLUMNS, after project and arrival time)."""
    from records.store.writer import record_row

    return [(project_id, received_at, *record_row(r, r.ts)) for r in normalised]


def copy_ceiling(rows: list[tuple], *, tries: int = 3) -> float:
    """Rows/s of psycopg COPY of `rows` into an empty table shaped like the records table, the
    best of `tries`.

    The scratch table has the records table's columns, indexes and unique key (LIKE ... INCLUDING
    ALL): the cost of storing these rows at all, with nothing of ours in the way. A ceiling is
    what the machine can do: one COPY moved by 40 % between runs (a checkpoint, the page cache),
    so the best of a few is taken, never a lucky low one.
    """
    return max(_copy_rate(rows) for _ in range(tries))


def _copy_rate(rows: list[tuple]) -> float:
    from django.db import connection

    from records.store.writer import COLUMNS, RECORD_TABLE

    columns = ", ".join(("project_id", "received_at", *COLUMNS))
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_copy")
        cursor.execute(f"CREATE TABLE bench_copy (LIKE {RECORD_TABLE} INCLUDING ALL)")
        # The records table is partitioned (records.store.partitions) and keeps (project,
        # record_key) unique in another table: the ceiling keeps paying for that uniqueness as
        # before.
        cursor.execute(
            "CREATE UNIQUE INDEX IF NOT EXISTS bench_copy_key "
            "ON bench_copy (project_id, record_key)"
        )
        start = time.perf_counter()
        with cursor.cursor.copy(f"COPY bench_copy ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        seconds = time.perf_counter() - start
        cursor.execute("SELECT count(*) FROM bench_copy")
        assert cursor.fetchone()[0] == len(rows)
        cursor.execute("DROP TABLE bench_copy")
    return len(rows) / seconds


def timed_writes(project: Any, records: list[dict], batch: int, now: datetime) -> tuple[float, int]:
    """Seconds taken and records accepted writing `records` for `project` through
    api.record_writes.write_records, the one write of every transport, as native bodies of
    `batch` records (encoded before the clock starts; HTTP left out, as it costs any two sides
    of a comparison alike)."""
    import orjson

    from api.record_writes import Posted, write_records

    bodies = [
        orjson.dumps({"records": records[i : i + batch]}) for i in range(0, len(records), batch)
    ]
    accepted = 0
    started = time.perf_counter()
    for body in bodies:

        def decode(body: bytes = body) -> Posted:
            return Posted(list(enumerate(orjson.loads(body)["records"])))

        accepted += write_records(project, decode, now=now).accepted
    return time.perf_counter() - started, accepted

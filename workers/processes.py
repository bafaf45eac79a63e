"""The product's processes — gunicorn, the OTLP/gRPC receiver and the Celery workers with beat
— as child processes.

Used by `manage.py serve` (the README's start command), the end-to-end tests and the
benchmarks, so that all three run the same commands. Each child leads its own process group,
and stopping it takes its own workers (Celery's pool, in that group; gunicorn's, each in a
session of its own: gunicorn.conf.py) with it; and each is remembered until stopped, so that a
process that exits without stopping its children (an error past the code that would, a signal
turned into an exit) stops them at exit (stop_leftovers).
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from config.queues import Queue

BASE_DIR = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def web_command(bind: str, workers: int, *extra: str) -> list[str]:
    """gunicorn serving config.wsgi on `bind` (host:port) with `workers` processes, configured
    by the gunicorn.conf.py at the root (threaded workers: a read never waits behind a batch)."""
    return [str(BIN / "gunicorn"), "--config", str(BASE_DIR / "gunicorn.conf.py"), "config.wsgi",
            "--bind", bind, "--workers", str(workers), *extra]  # fmt: skip


def otlp_grpc_command(host: str, port: int, *extra: str) -> list[str]:
    """The OTLP/gRPC receiver (api/otlp_grpc.py) listening on host:port."""
    return [sys.executable, str(BASE_DIR / "manage.py"), "serve_otlp_grpc", "--host", host,
            "--port", str(port), *extra]  # fmt: skip


def worker_command(
    queues: Iterable[str],
    concurrency: int,
    *,
    name: str,
    beat_schedule: str | Path | None = None,
    loglevel: str = "INFO",
    host: str | None = None,
) -> list[str]:
    """A Celery worker named `name`@host consuming `queues`; with the beat scheduler embedded
    when `beat_schedule` (the file beat keeps its state in) is given. The host is `host`,
    else DECISIONBOARD_HOSTNAME, else the machine's name, so that two hosts' workers never
    share one Celery node name (nor two sets of processes on one machine)."""
    cmd = [
        str(BIN / "celery"),
        "-A",
        "config",
        "worker",
        "--queues",
        ",".join(queues),
        "--hostname",
        f"{name}@{host or os.environ.get('DECISIONBOARD_HOSTNAME') or '%h'}",
        "--concurrency",
        str(concurrency),
        "--loglevel",
        loglevel,
    ]
    if beat_schedule is not None:
        cmd += ["--beat", "--schedule", str(beat_schedule)]
    return cmd


def worker_commands(beat_schedule: str | Path, loglevel: str = "INFO") -> list[list[str]]:
    """The workers of the whole product (config.queues): one with beat on `default`, where the
    catch-up passes run, and one for notifications and exports, so that a slow webhook or a
    long export never delays the rollups."""
    return [
        worker_command(
            [Queue.DEFAULT], 2, name="default", beat_schedule=beat_schedule, loglevel=loglevel
        ),
        worker_command([Queue.NOTIFICATIONS, Queue.EXPORTS], 2, name="jobs", loglevel=loglevel),
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The children this process started and has not stopped, by pid; and the pid they belong to
# (a forked copy of this module holds its parent's list, which is not its to stop).
_live: dict[int, subprocess.Popen] = {}
_owner: int | None = None


def spawn(cmd: list[str], *, env: dict | None = None, log=None) -> subprocess.Popen:
    """Start `cmd` in its own process group from the project's directory; output to `log` (an
    open file), else inherited."""
    global _owner
    child = subprocess.Popen(
        cmd,
        cwd=BASE_DIR,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT if log is not None else None,
        start_new_session=True,
    )
    if _owner != os.getpid():
        _owner = os.getpid()
        _live.clear()
        atexit.register(stop_leftovers)
    _live[child.pid] = child
    return child


def stop_leftovers(timeout: float = 5.0) -> None:
    """Stop every child this process started and has not stopped (as stop() does); at exit."""
    if _owner == os.getpid() and _live:
        stop(list(_live.values()), timeout)


def stop(children: Iterable[subprocess.Popen], timeout: float = 15.0) -> None:
    """SIGTERM each child and wait up to `timeout` in all, then SIGKILL what is left of each
    child's process group and of the processes it had started.

    The signal goes to the child alone: a gunicorn master or a Celery worker then stops its own
    workers cleanly (a Celery worker finishes the tasks it runs). Whatever outlives that — a
    child that hung, or workers it left behind — is killed: those in its group with the group,
    and its descendants of the moment of the stop by pid (a gunicorn worker leads a session of
    its own, outside its master's group).
    """
    children = list(children)
    families = {child.pid: descendants(child.pid) for child in children}
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:  # the group is gone: nothing was left behind
            pass
        for pid, started in families[child.pid].items():
            if _started_at(pid) == started:  # the same process still, not a pid used again
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        child.wait()
        _live.pop(child.pid, None)


def descendants(pid: int) -> dict[int, int]:
    """The processes below `pid` (children, theirs, ...), by pid with their start times."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):  # gone meanwhile
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    found: dict[int, int] = {}
    todo = list(children.get(pid, ()))
    while todo:
        below = todo.pop()
        started = _started_at(below)
        if started is not None:
            found[below] = started
            todo += children.get(below, ())
    return found


def _started_at(pid: int) -> int | None:
    """The start time of a live process (clock ticks after boot), None when it is gone or a
    zombie: with the pid, it names one process, where a pid alone may be used again."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


@contextmanager
def running(
    cmd: list[str], *, env: dict | None = None, log: Path | None = None, timeout: float = 20.0
) -> Iterator[subprocess.Popen]:
    """`cmd` running for the duration of the block (output to the file `log`), then stopped."""
    with open(log, "w") if log is not None else nullcontext() as out:
        proc = spawn(cmd, env=env, log=out)
        try:
            yield proc
        finally:
            stop([proc], timeout)

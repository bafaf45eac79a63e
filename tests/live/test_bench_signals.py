"""A benchmark that is killed stops the servers it started (bench.common.exit_on_signals).

Each test runs a small benchmark-shaped script in its own process, as bench/soak.py runs:
children started with workers.processes (each leading its own process group; a gunicorn
worker leads a session of its own, gunicorn.conf.py), and a process forked from the benchmark.
Then it kills the script and looks for what is left in /proc.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.live import wait_until
from workers import processes

ROOT = Path(__file__).resolve().parents[2]

# gunicorn serving the product (a master and its worker, in a session of its own), and a forked
# process; prints their pids once gunicorn accepts connections, then waits to be killed.
SERVING = """
import multiprocessing, sys, time
sys.path.insert(0, {root!r})
from bench.common import exit_on_signals, gunicorn
exit_on_signals()
forked = multiprocessing.get_context("fork").Process(target=time.sleep, args=(300,), daemon=True)
forked.start()
with gunicorn(1, timeout=30) as (port, web):
    print("pids", web.pid, forked.pid, flush=True)
    time.sleep(300)
"""

# A child that ignores SIGTERM, stopped with a minute's grace: only a second signal is quick.
STUBBORN = """
import os, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from bench.common import exit_on_signals
from workers.processes import running
exit_on_signals()
ready = Path(os.environ["DECISIONBOARD_VAR_DIR"]) / "ignoring"
child = [sys.executable, "-c", "import pathlib, signal, sys, time; "
         "signal.signal(signal.SIGTERM, signal.SIG_IGN); pathlib.Path(sys.argv[1]).touch(); "
         "time.sleep(300)", str(ready)]
with running(child, timeout=60) as proc:
    while not ready.exists():
        time.sleep(0.05)
    print("pids", proc.pid, flush=True)
    time.sleep(300)
"""


def start(script: str, tmp_path: Path) -> tuple[subprocess.Popen, list[int]]:
    env = {**os.environ, "DECISIONBOARD_VAR_DIR": str(tmp_path)}
    proc = processes.spawn(
        [sys.executable, "-c", script.format(root=str(ROOT))],
        env=env,
        log=subprocess.PIPE,
    )
    # The script prints the pids once its children are up (gunicorn may log before).
    for line in proc.stdout:
        if line.startswith(b"pids "):
            return proc, [int(pid) for pid in line.split()[1:]]
    raise AssertionError(f"the script ended without starting its children ({proc.wait()})")


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (one nobody has reaped yet is as good as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


def group(pgid: int) -> list[int]:
    """The live processes of a process group."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(stat.parent.name))
    return members


def kill_groups(*pgids: int) -> None:
    """Kill what is left of these groups (after a failure; none is left after a pass)."""
    for pgid in pgids:
        if group(pgid):
            os.killpg(pgid, signal.SIGKILL)


def test_a_benchmark_killed_with_sigterm_stops_its_gunicorn_and_forked_processes_first(tmp_path):
    proc, (web, forked) = start(SERVING, tmp_path)
    try:
        wait_until(lambda: processes.descendants(web), 30, "gunicorn's worker")
        (worker,) = processes.descendants(web)
        assert group(worker) == [worker]  # its own group (and session), outside the master's
        assert alive(forked)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
        assert group(web) == []
        assert not alive(worker)
        wait_until(lambda: not alive(forked), 10, "the forked process to end")
    finally:
        processes.stop([proc])
        kill_groups(web, *processes.descendants(web))


def test_a_second_signal_kills_what_a_first_is_still_stopping(tmp_path):
    proc, (child,) = start(STUBBORN, tmp_path)
    try:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: the stop waits up to a minute for the child
        time.sleep(1)
        assert proc.poll() is None and alive(child)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 128 + signal.SIGTERM
        assert time.monotonic() - started < 10
        assert group(child) == []
    finally:
        processes.stop([proc])
        kill_groups(child)


# A child whose own child leaves its group for a session of its own (as a gunicorn worker does)
# and ignores SIGTERM; the child prints that process's pid once it has left (the pipe closes after
# setsid) and ends on SIGTERM without it.
WANDERING = """
import os, signal, sys, time
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(read)
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.close(write)
    time.sleep(300)
    os._exit(0)
os.close(write)
os.read(read, 1)
print("pids", pid, flush=True)
time.sleep(300)
"""


def test_stop_kills_a_descendant_that_left_the_childs_group():
    child = processes.spawn([sys.executable, "-c", WANDERING], log=subprocess.PIPE)
    line = child.stdout.readline()
    assert line.startswith(b"pids "), line
    wanderer = int(line.split()[1])
    try:
        assert group(child.pid) == [child.pid] and group(wanderer) == [wanderer]
        processes.stop([child], timeout=2)
        wait_until(lambda: not alive(wanderer), 10, "the descendant to be killed")
    finally:
        if alive(wanderer):
            os.kill(wanderer, signal.SIGKILL)

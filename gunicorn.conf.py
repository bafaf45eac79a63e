"""The web server's configuration, shipped with the product.

gunicorn reads ./gunicorn.conf.py by default; workers.processes.web_command names this file
explicitly, so `bin/start` (manage.py serve), the tests, the benchmarks and a production
`gunicorn config.wsgi` run from this folder all serve with it.

Threads, so that a read never queues behind an ingest batch: with sync workers a request waits
for a free process, and two batches of 500 records, slow under load, held both of bin/start's
two workers while pages waited behind them. A thread of
a gthread worker takes the next request at once; a batch is Python work under the GIL, which
the interpreter hands over every few milliseconds, and every query releases it. Each thread
keeps its own database connection (CONN_MAX_AGE): workers x threads connections per machine.
"""

from __future__ import annotations

import os
import sys

from config.env import env_int

wsgi_app = "config.wsgi"
worker_class = "gthread"
# Processes: one or two per core. WEB_CONCURRENCY is the variable platforms set for this.
workers = env_int("WEB_CONCURRENCY", 2, minimum=1)
threads = env_int("DECISIONBOARD_WEB_THREADS", 4, minimum=1)
# Workers are not replaced after a number of requests (0), because gunicorn's gthread worker
# drops connections as it leaves: it closes connections it accepted but had not read yet, and
# kept-alive ones it had just answered keep-alive (a known gunicorn bug, #3038 in its tracker), and
# a client sees resets and closed connections. Nothing asks for it: a web worker's memory is flat
# under sustained ingest (bench/soak.py prints it). An operator may still set one (with a tenth of
# it as jitter) and must then have clients that resend on a closed connection.
max_requests = env_int("DECISIONBOARD_WEB_MAX_REQUESTS", 0, minimum=0)
max_requests_jitter = max_requests // 10
# A request is never this long (ingest bodies are capped at 5 MB, exports stream); a worker
# silent for longer is hung and replaced.
timeout = 60
graceful_timeout = 10
# Idle keep-alive connections of ingest clients hold a thread's connection slot, not a thread.
keepalive = 5


# How long a thread may keep the GIL while another waits for it (CPython's default is 5 ms). A
# read's thread gives the GIL up for each of its queries and, when the answer is back, waits for
# it behind any thread validating an ingest batch: up to the whole interval per query, a dozen
# queries a page. At a fifth of the default each wait is at most a fifth as long; the batches
# lose little (a switch is cheap). bench/soak.py measures the pages under ingest.
SWITCH_INTERVAL_SECONDS = 0.001


def post_fork(server, worker) -> None:
    """Runs in each worker as it is forked: a session of its own, so that the kernel's CPU
    scheduler counts it as it counts a PostgreSQL backend.

    Linux with autogroup (on in Debian's kernels and most others, for processes that systemd or
    a container has not put in a CPU cgroup of their own) shares the CPU among sessions first,
    then among the processes of each. PostgreSQL gives each backend a session of its own;
    gunicorn keeps its workers in its master's, so with the database on the same machine, all
    the web workers together got the share of one backend. Under sustained ingest every read
    and every POST waited for that share: a read's thread spent twice its CPU time runnable and
    not running (/proc/thread-self/schedstat). bench/soak.py measures the pages under ingest.

    Nothing else changes: the master signals its workers by pid, and a worker exits when it
    sees its master gone (workers.processes.stop also kills them by pid).
    """
    os.setsid()


def post_worker_init(worker) -> None:
    """Runs in each worker once it has loaded the app, before its first request."""
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    # The objects of startup out of every full collection's walk (ops/heap.py).
    from ops.heap import freeze_startup_objects

    freeze_startup_objects(import_views=True)


def child_exit(server, worker) -> None:
    """A worker that exits (replaced after max_requests, or killed) folds its counts into the
    metrics folder's archive, so that /metrics keeps them and the folder does not grow. gunicorn
    calls this from its SIGCHLD handler, which another worker's exit may interrupt."""
    from ops.multiprocess import fold_exited

    fold_exited(worker.pid)

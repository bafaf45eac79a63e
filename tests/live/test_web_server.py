"""The web server as shipped (gunicorn.conf.py): a read never waits behind a slow request."""

from __future__ import annotations

import itertools
import os
import socket
import time

import requests

from records.models import ApiKey, Project
from tests.support.live import STARTUP_SECONDS, wait_until
from tests.support.services import database_url
from workers import processes


def test_a_page_is_served_while_one_process_is_busy_with_an_upload(tmp_path, transactional_db):
    key = ApiKey.issue(Project.objects.create(name="acme"), ApiKey.Scope.INGEST)[1]
    port = processes.free_port()
    env = dict(os.environ, DATABASE_URL=database_url(), DECISIONBOARD_VAR_DIR=str(tmp_path))
    base = f"http://127.0.0.1:{port}"
    # One process only: with sync workers it would be held by the upload below until timeout.
    with processes.running(
        processes.web_command(f"127.0.0.1:{port}", 1), env=env, log=tmp_path / "web.log"
    ) as master:
        wait_until(
            lambda: requests.get(f"{base}/accounts/login/", timeout=5).ok,
            STARTUP_SECONDS,
            "gunicorn",
        )
        # The worker leads a session of its own: the kernel shares the CPU with it as with each
        # PostgreSQL backend, not with all the workers together (gunicorn.conf.py post_fork).
        (worker,) = processes.descendants(master.pid)
        assert os.getsid(worker) == worker != os.getsid(master.pid)
        with socket.create_connection(("127.0.0.1", port)) as upload:
            # An ingest batch still arriving: headers and the first bytes of a 1 MB body.
            upload.sendall(
                b"POST /api/v1/records HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Authorization: Bearer " + key.encode() + b"\r\n"
                b"Content-Type: application/json\r\nContent-Length: 1048576\r\n\r\n"
                b'{"records": ['
            )
            time.sleep(0.5)  # let a worker thread take it and block reading the rest
            started = time.monotonic()
            page = requests.get(f"{base}/accounts/login/", timeout=10)
            assert page.status_code == 200
            assert time.monotonic() - started < 5
    assert "Using worker: gthread" in (tmp_path / "web.log").read_text()


def test_a_web_worker_hands_the_gil_over_every_millisecond():
    """gunicorn.conf.py's post_worker_init, as gunicorn loads it: a read waiting for the GIL
    behind an ingest batch's thread waits 1 ms at a time, not CPython's 5."""
    import gc
    import sys

    from django.conf import settings
    from gunicorn.app.base import Application

    class Loaded(Application):
        def init(self, parser, opts, args):
            return {}

        def load(self):
            raise NotImplementedError

    app = Loaded.__new__(Loaded)  # no argv parsing: only the config file is wanted
    app.usage, app.prog, app.callable = None, "gunicorn", None
    app.load_default_config()
    app.load_config_from_file(str(settings.BASE_DIR / "gunicorn.conf.py"))
    before = sys.getswitchinterval()
    try:
        app.cfg.post_worker_init(None)
        assert sys.getswitchinterval() == 0.001
    finally:
        sys.setswitchinterval(before)
        gc.unfreeze()  # the hook froze this process's objects too (tests/ops/test_heap.py)
    assert app.cfg.worker_class_str == "gthread"


def test_sustained_posts_on_new_and_kept_alive_connections_meet_no_closed_connection(
    tmp_path, transactional_db
):
    """Clients posting back to back, on kept-alive connections and on a new one per request,
    against the shipped configuration: every POST is answered 200 and no worker is replaced.
    gunicorn's gthread worker drops connections as it leaves (benoitc/gunicorn#3038), so
    gunicorn.conf.py replaces none after a number of requests; a few hundred POSTs are enough to
    meet such a drop when workers are replaced every few dozen requests."""
    import threading

    key = ApiKey.issue(Project.objects.create(name="acme"), ApiKey.Scope.INGEST)[1]
    port = processes.free_port()
    env = dict(os.environ, DATABASE_URL=database_url(), DECISIONBOARD_VAR_DIR=str(tmp_path))
    env.pop("DECISIONBOARD_WEB_MAX_REQUESTS", None)
    base = f"http://127.0.0.1:{port}"
    errors: list[str] = []
    numbers = itertools.count(1)
    sent = [0]
    # A number of POSTs, not a time: a busy machine answers fewer in the same seconds.
    posts, give_up = 420, time.monotonic() + 180

    def more() -> bool:
        return sent[0] < posts and time.monotonic() < give_up

    def post(session: requests.Session, client: int) -> None:
        n = sent[0] = next(numbers)
        record = {"id": f"c{client}-{n}", "kind": "turn", "run_id": f"run-{client}",
                  "ts": "2026-01-01T00:00:00Z", "data": {"iteration": 1}}  # fmt: skip
        try:
            response = session.post(
                f"{base}/api/v1/records",
                json={"records": [record]},
                headers={"Authorization": f"Bearer {key}"},
                timeout=30,
            )
            if response.status_code != 200:
                errors.append(f"HTTP {response.status_code}")
        except requests.ConnectionError as error:
            errors.append(f"{'kept' if client < 3 else 'new'}: {error!r}"[:90])

    def kept_alive(client: int) -> None:  # one connection for as long as the server keeps it
        with requests.Session() as session:
            while more():
                post(session, client)

    def one_each(client: int) -> None:  # a new connection for every request
        while more():
            with requests.Session() as session:
                post(session, client)

    with processes.running(
        processes.web_command(f"127.0.0.1:{port}", 2), env=env, log=tmp_path / "web.log"
    ):
        wait_until(
            lambda: requests.get(f"{base}/healthz", timeout=5).ok, STARTUP_SECONDS, "gunicorn"
        )
        clients = [threading.Thread(target=kept_alive, args=(c,)) for c in range(3)] + [
            threading.Thread(target=one_each, args=(c,)) for c in range(3, 6)
        ]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join()
    assert sent[0] >= posts, f"{sent[0]} POSTs answered in 180 s"
    assert errors == [], (len(errors), sent[0], sorted(set(errors)))
    assert "Autorestarting worker" not in (tmp_path / "web.log").read_text()

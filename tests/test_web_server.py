"""The web server as shipped (gunicorn.conf.py): a read never waits behind a slow request."""

from __future__ import annotations

import os
import socket
import time

import requests

from records.models import ApiKey, Project
from tests.conftest import database_url
from tests.live import wait_until
from workers import processes


def test_a_page_is_served_while_one_process_is_busy_with_an_upload(tmp_path, transactional_db):
    key = ApiKey.issue(Project.objects.create(name="acme"), ApiKey.Scope.INGEST)[1]
    port = processes.free_port()
    env = dict(os.environ, DATABASE_URL=database_url(), DECISIONBOARD_VAR_DIR=str(tmp_path))
    base = f"http://127.0.0.1:{port}"
    # One process only: with sync workers it would be held by the upload below until timeout.
    with processes.running(
        processes.web_command(f"127.0.0.1:{port}", 1), env=env, log=tmp_path / "web.log"
    ):
        wait_until(lambda: requests.get(f"{base}/accounts/login/", timeout=5).ok, 60, "gunicorn")
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
    assert app.cfg.worker_class_str == "gthread"

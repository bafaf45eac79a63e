"""The test clients' WhiteNoise scans the static files once per configuration
(tests/support/static_scan.py) and serves what a scan of its own would."""

from __future__ import annotations

from django.test import Client
from whitenoise import base
from whitenoise.middleware import WhiteNoiseMiddleware

from tests.support.static_scan import SHIPPED_INIT, static_files_scanned_once


def scans_counted(monkeypatch) -> list[str]:
    """The roots WhiteNoise walks from now on, with its set-up as shipped (the suite's session
    runs under static_files_scanned_once)."""
    monkeypatch.setattr(WhiteNoiseMiddleware, "__init__", SHIPPED_INIT)
    walked: list[str] = []
    scantree = base.scantree

    def counted(root):
        walked.append(root)
        return scantree(root)

    monkeypatch.setattr(base, "scantree", counted)
    return walked


def test_a_second_middleware_takes_the_first_scan_and_a_changed_setting_scans_again(
    monkeypatch, settings
):
    walked = scans_counted(monkeypatch)
    with static_files_scanned_once():
        first = WhiteNoiseMiddleware(lambda request: None)
        assert walked
        walked.clear()
        second = WhiteNoiseMiddleware(lambda request: None)
        assert walked == []
        assert second.files == first.files and second.files is not first.files
        assert second.static_prefix == "/static/" and second.max_age == first.max_age

        settings.STATIC_URL = "/assets/"
        moved = WhiteNoiseMiddleware(lambda request: None)
        assert walked
        assert {url.replace("/assets/", "/static/", 1) for url in moved.files} == set(first.files)
    walked.clear()
    WhiteNoiseMiddleware(lambda request: None)  # outside: the middleware as it ships
    assert walked


def test_a_client_under_it_serves_a_static_file_as_a_fresh_scan_does(monkeypatch):
    monkeypatch.setattr(WhiteNoiseMiddleware, "__init__", SHIPPED_INIT)
    path = "/static/vendor/plotly.min.js"
    fresh = Client().get(path)
    assert fresh.status_code == 200
    with static_files_scanned_once():
        Client().get("/static/nothing-here.js")
        kept = Client().get(path)
    assert kept.status_code == 200
    assert b"".join(kept.streaming_content) == b"".join(fresh.streaming_content)
    assert kept["Cache-Control"] == fresh["Cache-Control"]

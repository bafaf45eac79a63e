"""Static files: hashed names, gzip and a year's caching once collected; /favicon.ico."""

from __future__ import annotations

import gzip
import re

import pytest
from django.templatetags.static import static
from django.test import Client

from dashboard.http.staticfiles import ensure_collected, is_current


@pytest.fixture
def page(db) -> str:
    return Client().get("/accounts/login/").content.decode()


def test_it_links_hashed_names_and_serves_them_compressed_and_long_cached(page):
    assert is_current()  # tests/conftest.py collected them, as bin/start does
    css = re.search(r'href="(/static/dashboard/base\.[0-9a-f]{12}\.css)"', page)
    assert css, page
    assert re.search(r'src="/static/vendor/htmx\.min\.[0-9a-f]{12}\.js"', page)
    response = Client().get(css.group(1), HTTP_ACCEPT_ENCODING="gzip")
    assert response.status_code == 200
    assert response["Content-Encoding"] == "gzip"
    assert "immutable" in response["Cache-Control"]
    assert int(re.search(r"max-age=(\d+)", response["Cache-Control"]).group(1)) >= 365 * 86400
    body = gzip.decompress(b"".join(response.streaming_content))
    assert b"--accent" in body


def test_plotly_travels_compressed():
    url = static("vendor/plotly.min.js")  # as the chart pages link it
    assert re.fullmatch(r"/static/vendor/plotly\.min\.[0-9a-f]{12}\.js", url)
    response = Client().get(url, HTTP_ACCEPT_ENCODING="gzip")
    assert response.status_code == 200 and response["Content-Encoding"] == "gzip"
    assert len(b"".join(response.streaming_content)) < 2_000_000  # 4.8 MB as shipped


def test_a_second_collect_has_nothing_to_do():
    assert ensure_collected() is False


def test_favicon_ico_is_there(db):
    response = Client().get("/favicon.ico", follow=True)
    assert response.status_code == 200
    assert b"".join(response.streaming_content)[:4] == b"\x00\x00\x01\x00"  # an ICO header

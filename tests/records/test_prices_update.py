"""Fetching newer model prices is opt-in (DECISIONBOARD_PRICES_UPDATE): off, nothing leaves the
machine; on, the process fetches from the configured URL, and a failed fetch keeps pricing."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from records.contract.normalise import normalise
from records.store.ingest_pricing import price_records, stop_fetching_prices
from tests.support.factories import record

NOW = datetime(2026, 11, 20, 10, tzinfo=UTC)


@pytest.fixture
def price_server():
    """A local server standing in for the prices URL: it counts requests and fails them."""
    hits: list[str] = []

    class Failing(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the name http.server calls)
            hits.append(self.path)
            self.send_response(500)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/prices.json", hits
    stop_fetching_prices()
    server.shutdown()


def priced_call():
    call = normalise(record("model_call", ts="2026-11-20T09:00:00Z"), now=NOW)
    price_records(1, [call])
    return call


def test_it_fetches_nothing_by_default(settings, price_server, db):
    url, hits = price_server
    settings.DECISIONBOARD = {**settings.DECISIONBOARD, "PRICES_UPDATE_URL": url}
    assert priced_call().cost_source == "genai-prices"
    threading.Event().wait(1.0)
    assert hits == []


def test_it_fetches_when_asked_and_keeps_pricing_when_the_fetch_fails(settings, price_server, db):
    url, hits = price_server
    settings.DECISIONBOARD = {
        **settings.DECISIONBOARD,
        "PRICES_UPDATE": True,
        "PRICES_UPDATE_URL": url,
    }
    call = priced_call()
    for _ in range(50):
        if hits:
            break
        threading.Event().wait(0.1)
    assert hits == ["/prices.json"]
    assert call.cost_source == "genai-prices"
    assert call.cost_nano > 0

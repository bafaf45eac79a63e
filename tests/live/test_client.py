"""The Python client (client/, decisionboard_client) against the product under gunicorn."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import genai_prices
import pytest
from decisionboard_client import Decisionboard, call_usage

from records.contract.cost import NANO_PER_USD
from records.models import ApiKey, Project, Record
from tests.support.factories import DATA, KINDS
from tests.support.live import web_server
from workers import processes


@pytest.fixture(scope="module")
def base(django_db_setup, tmp_path_factory):
    with web_server(tmp_path_factory.mktemp("client-web")) as url:
        yield url


@pytest.fixture
def key(transactional_db) -> str:
    return ApiKey.issue(Project.objects.create(name="acme"), ApiKey.Scope.INGEST)[1]


def stored_ids() -> list[str]:
    return list(Record.objects.values_list("record_key", flat=True))


def test_it_sends_every_kind_through_its_own_method_and_record(base, key):
    with Decisionboard(base, key, agent="support-bot", session_id="sess-1") as db:
        for kind in KINDS:
            method = getattr(db, kind.replace(".", "_"))
            assert method(run_id="run-1", **DATA[kind]) is not None
        db.record("notice", DATA["notice"], run_id="run-2", id="my-own-id")
        assert db.flush(timeout=30)
        stats = db.stats()
    # Delivered: a batch resent after its answer was lost comes back as duplicates.
    delivered = stats["sent"] + stats["duplicates"]
    assert (delivered, stats["rejected"], stats["dropped"]) == (len(KINDS) + 1, 0, 0)
    by_kind = {r.kind: r for r in Record.objects.filter(run_id="run-1")}
    assert {kind: json.loads(json.dumps(by_kind[kind].data)) for kind in KINDS} == DATA
    assert by_kind["notice"].agent == "support-bot" and by_kind["notice"].session_id == "sess-1"
    assert Record.objects.filter(record_key="my-own-id").exists()


def test_it_stamps_its_release_on_every_record(base, key):
    with Decisionboard(base, key, agent="support-bot", release="support-bot 2.3.1") as db:
        for kind in KINDS:
            getattr(db, kind.replace(".", "_"))(run_id="run-1", **DATA[kind])
        db.record("notice", DATA["notice"], run_id="run-2")
        assert db.flush(timeout=30)
        stats = db.stats()
    assert (stats["sent"] + stats["duplicates"], stats["rejected"]) == (len(KINDS) + 1, 0)
    assert set(Record.objects.values_list("release", flat=True)) == {"support-bot 2.3.1"}
    with Decisionboard(base, key) as db:  # without one, records carry none
        db.notice(run_id="run-3", **DATA["notice"])
        assert db.flush(timeout=30)
    assert Record.objects.get(run_id="run-3").release is None


@pytest.mark.parametrize("release", ["", "v" * 201, "v1\n", "v1\tbeta", 12])
def test_it_refuses_a_release_the_server_would_refuse_at_construction(release):
    with pytest.raises(ValueError, match="release"):
        Decisionboard("http://127.0.0.1:9", "k", release=release, flush_at_exit=False)


def test_a_rejected_record_is_counted_and_its_neighbours_stored(base, key):
    with Decisionboard(base, key) as db:
        db.model_call(run_id="r", **{**DATA["model_call"], "durationMs": -5.0})
        db.notice(run_id="r", **DATA["notice"])
        assert db.flush(timeout=30)
        stats = db.stats()
    assert (stats["sent"] + stats["duplicates"], stats["rejected"]) == (1, 1)
    assert "data.durationMs" in stats["last_error"]
    assert list(Record.objects.values_list("kind", flat=True)) == ["notice"]


def test_a_call_that_cannot_be_recorded_is_counted_not_raised(base, key):
    db = Decisionboard(base, key)
    db.record("notice", {"code": "a.b", "message": "m", "detail": {"when": object()}}, run_id="r")
    db.record("notice", DATA["notice"], run_id="r", ts="2026-11-20T09:00:00Z")
    assert db.flush(timeout=30)
    db.close()
    assert db.record("notice", DATA["notice"], run_id="r") is None  # after close: counted
    stats = db.stats()
    assert (stats["invalid"], stats["sent"] + stats["duplicates"], stats["lost"]) == (1, 1, 1)


def test_the_agent_never_blocks_on_a_dead_server_and_nothing_is_lost_or_stored_twice(tmp_path, key):
    port = processes.free_port()
    ids = []
    db = Decisionboard(f"http://127.0.0.1:{port}", key, batch_size=20, flush_interval=0.1)
    with web_server(tmp_path, port=port):
        ids += [db.notice(run_id="r", **DATA["notice"]) for _ in range(50)]
        assert db.flush(timeout=30)
    # The server is gone: every call still returns at once.
    durations = []
    for _ in range(50):
        started = time.perf_counter()
        ids.append(db.notice(run_id="r", **DATA["notice"]))
        durations.append(time.perf_counter() - started)
    assert max(durations) < 0.05 and sum(durations) / len(durations) < 0.001
    assert not db.flush(timeout=1)  # nothing can be sent now
    assert db.stats()["retries"] > 0
    with web_server(tmp_path, port=port):  # back, on the same address
        assert db.flush(timeout=60)
    db.close()
    assert sorted(stored_ids()) == sorted(ids) and len(set(ids)) == 100
    assert db.stats()["sent"] + db.stats()["duplicates"] == 100


def test_a_full_queue_drops_the_oldest_and_counts_them(tmp_path, key):
    port = processes.free_port()
    db = Decisionboard(f"http://127.0.0.1:{port}", key, max_queue=10, flush_interval=5)
    ids = [db.notice(run_id="r", **DATA["notice"]) for _ in range(25)]
    assert db.stats()["dropped"] == 15 and db.stats()["queue"] == 10
    with web_server(tmp_path, port=port):
        assert db.flush(timeout=60)
    db.close()
    assert sorted(stored_ids()) == sorted(ids[15:])  # the newest ten


# Responses as each provider's API returns them (usage with cached and reasoning or cache-write
# tokens), the genai-prices id of the provider and the API flavour its usage extractor reads.
RESPONSES = {
    "openai chat completions": (
        "openai",
        "chat",
        {
            "model": "gpt-4o-2024-08-06",
            "usage": {
                "prompt_tokens": 2006,
                "completion_tokens": 300,
                "total_tokens": 2306,
                "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 192, "audio_tokens": 0},
            },
        },
    ),
    "openai responses": (
        "openai",
        "responses",
        {
            "model": "gpt-5",
            "usage": {
                "input_tokens": 9000,
                "input_tokens_details": {"cached_tokens": 8192, "cache_write_tokens": 0},
                "output_tokens": 1200,
                "output_tokens_details": {"reasoning_tokens": 1024},
                "total_tokens": 10200,
            },
        },
    ),
    "anthropic": (
        "anthropic",
        "default",
        {
            "model": "claude-sonnet-4-5",
            "usage": {
                "input_tokens": 50,
                "output_tokens": 300,
                "cache_creation_input_tokens": 1200,
                "cache_read_input_tokens": 4000,
            },
        },
    ),
    "gemini": (
        "google",
        "default",
        {
            "modelVersion": "gemini-2.5-flash",
            "usageMetadata": {
                "promptTokenCount": 5000,
                "cachedContentTokenCount": 4000,
                "candidatesTokenCount": 300,
                "thoughtsTokenCount": 200,
                "totalTokenCount": 5500,
            },
        },
    ),
}


def test_it_turns_each_providers_usage_into_disjoint_counts():
    from openai.types import CompletionUsage  # the SDK's own object, read by attribute

    sdk = CompletionUsage.model_validate(RESPONSES["openai chat completions"][2]["usage"])
    expected = {"input": 86, "output": 108, "cacheRead": 1920, "thinking": 192}
    assert call_usage(sdk) == expected
    assert call_usage(RESPONSES["openai chat completions"][2]["usage"]) == expected
    assert call_usage(RESPONSES["openai responses"][2]["usage"]) == {
        "input": 808,
        "output": 176,
        "cacheRead": 8192,
        "thinking": 1024,
    }
    assert call_usage(RESPONSES["anthropic"][2]["usage"]) == {
        "input": 50,
        "output": 300,
        "cacheRead": 4000,
        "cacheWrite": 1200,
    }
    assert call_usage(RESPONSES["gemini"][2]) == {
        "input": 1000,
        "output": 300,
        "cacheRead": 4000,
        "thinking": 200,
    }
    langchain = {
        "input_tokens": 5250,
        "output_tokens": 300,
        "input_token_details": {"cache_read": 4000, "cache_creation": 1200},
        "output_token_details": {"reasoning": 100},
    }
    assert call_usage(langchain) == {
        "input": 50,
        "output": 200,
        "cacheRead": 4000,
        "cacheWrite": 1200,
        "thinking": 100,
    }
    assert call_usage({"input": 5, "output": 1}) == {"input": 5, "output": 1}
    assert call_usage({"tokens": 5}) is None


def test_a_providers_usage_is_counted_once_and_priced_as_genai_prices_does(base, key):
    with Decisionboard(base, key) as db:
        for name, (_, _, response) in RESPONSES.items():
            model = response.get("model") or response["modelVersion"]
            usage = response.get("usage") or response["usageMetadata"]
            db.model_call(
                run_id=name,
                iteration=0,
                provider=RESPONSES[name][0],
                model=model,
                usage=usage,
                stopReason="endTurn",
                durationMs=900.0,
            )
        assert db.flush(timeout=30)
        assert db.stats()["rejected"] == 0
    stored = {r.run_id: r for r in Record.objects.filter(kind="model_call")}
    assert stored["openai chat completions"].data["usage"] == {
        "input": 86,
        "output": 108,
        "cacheRead": 1920,
        "thinking": 192,
    }
    for name, (provider, flavour, response) in RESPONSES.items():
        # genai-prices reads the provider's own usage: the oracle of what the call cost.
        extracted = genai_prices.extract_usage(response, provider_id=provider, api_flavor=flavour)
        want = extracted.calc_price(genai_request_timestamp=stored[name].ts).total_price
        assert stored[name].cost_source == "genai-prices", name
        assert abs(stored[name].cost_nano - want * NANO_PER_USD) <= 1, name


class _Loopback(BaseHTTPRequestHandler):
    """A stand-in for the records API: reads a posted batch, answers it as the API does."""

    def posted(self) -> int:
        """How many records the batch posted holds."""
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        return len(json.loads(body)["records"])

    def answer(self, status: int, accepted: int, retry_after: str = "") -> None:
        payload = json.dumps({"accepted": accepted, "duplicates": 0, "rejected": []}).encode()
        self.send_response(status)
        if retry_after:
            self.send_header("Retry-After", retry_after)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


class _Scripted(_Loopback):
    """Answers in turn what `script` says, then 200; notes when each request came."""

    script: list[tuple[int, str]] = []
    seen: list[tuple[float, int]] = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        count = self.posted()
        type(self).seen.append((time.monotonic(), count))
        status, retry_after = type(self).script.pop(0) if type(self).script else (200, "")
        self.answer(status, count, retry_after)


def test_it_waits_as_retry_after_says_on_429_and_503():
    _Scripted.script = [(429, "1"), (503, "2")]
    _Scripted.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        db = Decisionboard(f"http://127.0.0.1:{server.server_port}", "k", flush_interval=0.05)
        for _ in range(30):
            db.notice(run_id="r", **DATA["notice"])
        assert db.flush(timeout=30)
        stats = db.stats()
        db.close()
    finally:
        server.shutdown()
    times = [t for t, _ in _Scripted.seen]
    assert [n for _, n in _Scripted.seen] == [30, 30, 30]  # the same batch, resent
    assert times[1] - times[0] >= 0.95 and times[2] - times[1] >= 1.95
    assert (stats["retries"], stats["sent"]) == (2, 30)


class _Slow(_Loopback):
    """Answers 200 after `delay` seconds; notes each batch and how many were being answered at
    once at most."""

    delay = 0.3
    lock = threading.Lock()
    open_now = 0
    most = 0
    batches: list[int] = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        cls = type(self)
        count = self.posted()
        with cls.lock:
            cls.open_now += 1
            cls.most = max(cls.most, cls.open_now)
            cls.batches.append(count)
        time.sleep(cls.delay)
        with cls.lock:
            cls.open_now -= 1
        self.answer(200, count)


@pytest.mark.parametrize(("in_flight", "most"), [(2, 2), (1, 1)])
def test_it_keeps_two_batches_in_flight_and_a_trickle_in_one(in_flight, most):
    _Slow.open_now, _Slow.most, _Slow.batches = 0, 0, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        db = Decisionboard(url, "k", batch_size=10, max_in_flight=in_flight, flush_interval=5)
        for _ in range(60):
            db.notice(run_id="r", **DATA["notice"])
        assert db.flush(timeout=30)
        full = db.stats()
        # A trickle of less than a batch, with the other sender idle, goes as one batch.
        for _ in range(7):
            db.notice(run_id="r", **DATA["notice"])
        assert db.flush(timeout=30)
        assert db.close()
    finally:
        server.shutdown()
    assert (full["sent"], full["batches"], _Slow.most) == (60, 6, most)
    assert sorted(_Slow.batches) == [7, *[10] * 6]


def test_records_left_in_the_queue_are_sent_at_interpreter_exit(base, key):
    script = (
        "from decisionboard_client import Decisionboard\n"
        f"db = Decisionboard({base!r}, {key!r}, flush_interval=60)\n"
        "for i in range(3):\n"
        "    db.notice(run_id='exit-run', code='a.b', message=str(i), detail={})\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert Record.objects.filter(run_id="exit-run").count() == 3

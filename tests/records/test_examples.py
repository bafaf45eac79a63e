"""The sample records of examples/records.jsonl, posted as an agent posts them, with every
derived field and every metric they feed written out by hand from the seed semantics.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from records import catchup
from records.models import Record, Run, Streak

pytestmark = pytest.mark.both_dbs
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "records.jsonl"
RANGE = {"from": "2026-11-20T09:00:00Z", "to": "2026-11-20T10:00:00Z", "interval": "hour"}


def examples() -> list[dict]:
    return [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]


@pytest.fixture
def posted(alice):
    body = "\n".join(json.dumps(r) for r in examples())
    response = alice.client().post("/api/v1/records", body, content_type="application/x-ndjson")
    assert response.status_code == 200, response.content
    assert response.json() == {"accepted": 25, "duplicates": 0, "rejected": []}
    catchup.catch_up()
    return alice


def derived(record_id: str) -> tuple[Record, dict]:
    record = Record.objects.get(record_key=record_id)
    return record, record.derived


def test_every_derived_field_is_what_the_seeds_say(posted):
    r, d = derived("ex-001")  # step 0 on the default model
    assert not r.is_swap and d["swap"] is False and d["switch"] is False
    r, d = derived("ex-002")  # a narrowed pick: the doors are served minus offered
    assert d["doors"] == ["read_skill", "list_skills", "skip_step", "present"]
    assert r.model == "claude-haiku-4-5" and r.skip_reason is None and "violations" not in d
    r, d = derived("ex-003")
    assert d["total_tokens"] == 5210 + 312 + 4096 and r.tokens_in == 5210
    r, d = derived("ex-005")  # hybrid, a mapped call: an action
    assert d["decision"] == "action" and d["protocol"] == "hybrid"
    assert d["calls"] == [{"wire": "search-docs", "action": "search_docs", "invented": False}]
    r, d = derived("ex-006")  # the router swapped and switched
    assert r.is_swap and d["swap"] and d["switch"] and d["selected_model"] == "claude-haiku-4-5"
    r, d = derived("ex-007")  # narrowing asked for, skipped: the full set served
    assert r.skip_reason == "too-few" and "violations" not in d
    r, d = derived("ex-008")  # refund_now was never offered: invented
    assert d["invented"] == ["refund_now"] and d["decision"] == "action"
    assert d["calls"][0] == {"wire": "send_email", "action": "Send Email", "invented": False}
    r, d = derived("ex-009")
    assert r.is_contract_break and not d["ladder_fallback"] and r.outcome == "parse_error"
    r, d = derived("ex-011")  # the main model ruled behind the seat: a ladder fallback
    assert r.is_fallback and d["ladder_fallback"] and d["seat_model"] == "qwen3-8b"
    assert r.outcome == "block" and r.named_models == "|claude-sonnet-4-5|qwen3-8b|"
    r, _ = derived("ex-012")
    assert r.is_fallback and r.model == "qwen3-8b"
    r, _ = derived("ex-013")
    assert r.is_contract_break and r.model == "qwen3-8b"
    r, _ = derived("ex-016")
    assert r.is_fallback and r.model == "qwen3-8b"
    r, d = derived("ex-017")
    assert r.outcome == "unavailable" and not r.is_contract_break
    r, d = derived("ex-018")  # named UnsupportedToolChoiceError: a refused forced tool choice
    assert d["tool_choice_refused"] and r.is_error
    r, _ = derived("ex-020")
    assert r.outcome == "circuit_changed"
    r, d = derived("ex-021")  # a pick error that named no classifier model
    assert r.model is None and r.is_error and r.skip_reason == "unavailable"
    r, d = derived("ex-022")
    assert d["missed"] is True
    r, d = derived("ex-024")  # implicit protocol, plain text: the task is complete
    assert d["decision"] == "taskComplete"
    r, d = derived("ex-025")  # swapped (default sonnet), but no switch (gpt-5 before and after)
    assert r.is_swap and not d["switch"]
    assert not Record.objects.filter(has_violation=True).exists()  # the seeds keep their promises


def metric(persona, name, **params) -> dict:
    response = persona.client(persona.read_key).get(f"/api/v1/metrics/{name}", {**RANGE, **params})
    assert response.status_code == 200, response.content
    return {tuple(t["group"].values()): (t["value"], t["count"]) for t in response.json()["totals"]}


def test_every_metric_they_feed_is_what_the_seeds_say(posted):
    # call-9 walked on to the main model, call-15 timed out on the seat: one of two.
    assert metric(posted, "ladder_fallback_rate") == {("qwen3-8b",): (0.5, 2)}
    # ex-007 (too-few) and ex-021 (a pick error, unavailable) skipped narrowing; ex-002 did not.
    assert metric(posted, "narrowing_skip_rate") == {
        ("claude-haiku-4-5",): (0.5, 2),
        (None,): (1.0, 1),
    }
    by_reason = metric(posted, "narrowing_skip_rate", group_by="reason")
    assert by_reason[("unavailable",)] == (1 / 3, 3) and by_reason[("too-few",)] == (1 / 3, 3)
    assert metric(posted, "pick_error_rate") == {("claude-haiku-4-5",): (0.0, 2), (None,): (1.0, 1)}
    assert metric(posted, "swap_rate") == {("claude-sonnet-4-5",): (0.75, 4)}
    assert metric(posted, "first_pick_agreement") == {(): (0.5, 2)}
    assert metric(posted, "invented_tool_rate", group_by="agent") == {
        ("support-bot",): (0.5, 2),
        ("billing-agent",): (0.0, 1),
    }
    assert metric(posted, "verdicts") == {
        ("qwen3-8b", "parse_error"): (2, 2),
        ("qwen3-8b", "unavailable"): (1, 1),
        ("claude-sonnet-4-5", "block"): (1, 1),
    }
    # (groups list their fields in name order: error, model, provider)
    assert metric(posted, "provider_errors") == {
        ("UnsupportedToolChoiceError", "claude-opus-5-5", "anthropic"): (1, 1)
    }
    assert metric(posted, "violation_rate") != {} and all(
        value == 0 for value, _ in metric(posted, "violation_rate").values()
    )
    streaks = {s.model: (s.current, s.longest) for s in Streak.objects.all()}
    assert streaks == {"qwen3-8b": (2, 2), "claude-sonnet-4-5": (0, 0)}


def test_the_runs_name_every_model_they_touched(posted):
    run = Run.objects.get(run_id="run-0002")
    assert run.parent_run_id == "run-0001" and run.has_swap and run.record_count == 3
    assert set(run.models_seen) == {"claude-sonnet-4-5", "gpt-5"}
    response = posted.client(posted.read_key).get("/api/v1/runs", {"model": "gpt-5"})
    assert {r["run_id"] for r in response.json()["results"]} == {"run-0002"}

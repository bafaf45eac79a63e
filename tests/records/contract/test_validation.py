"""Every rule of the record envelope and the record kinds, checked on `records.contract.normalise`
without a database."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest

from records.contract.kinds import KIND_NAMES
from records.contract.normalise import Limits, NormalisedRecord, normalise
from tests.support.factories import KINDS, record

NOW = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)


def check(raw, **kwargs):
    return normalise(raw, now=NOW, **kwargs)


def test_it_covers_every_kind_of_the_design():
    assert set(KINDS) == set(KIND_NAMES)


@pytest.mark.parametrize("kind", KINDS)
def test_it_accepts_a_valid_record_of_each_kind(kind):
    result = check(record(kind))
    assert isinstance(result, NormalisedRecord), result
    assert result.kind == kind
    assert result.ts.tzinfo is not None


@pytest.mark.parametrize("kind", KINDS)
def test_it_keeps_unknown_fields_inside_data(kind):
    result = check(record(kind, data={"vendorExtra": {"nested": [1, 2]}}))
    assert '"vendorExtra":{"nested":[1,2]}' in result.data_json


def _without(field):
    def mutate(r):
        del r["data"][field]

    return mutate


# (kind, data overrides or a mutation, field path, words the message must contain)
REJECTIONS = [
    # pick
    ("tool_choice.pick", {"iteration": -1}, "data.iteration", "integer >= 0"),
    ("tool_choice.pick", {"iteration": 1.5}, "data.iteration", "must be an integer"),
    ("tool_choice.pick", {"source": "rules"}, "data.source", "one of: classifier"),
    ("tool_choice.pick", {"classifier": {"name": "x"}}, "data.classifier.model", "is required"),
    ("tool_choice.pick", {"offered": "grep"}, "data.offered", "must be an array"),
    ("tool_choice.pick", {"offered": ["t"] * 1001}, "data.offered", "at most 1000 items"),
    ("tool_choice.pick", {"offered": ["x" * 201]}, "data.offered[0]", "at most 200 characters"),
    (
        "tool_choice.pick",
        {"ranked": [{"name": "a", "score": 0.1}, {"name": "b", "score": "high"}]},
        "data.ranked[1].score",
        "must be a number",
    ),
    (
        "tool_choice.pick",
        {"ranked": [{"name": "a", "score": 0.1}, {"name": "b", "score": float("inf")}]},
        "data.ranked[1].score",
        "finite",
    ),
    (
        "tool_choice.pick",
        {"ranked": [{"name": "a", "score": float("nan")}]},
        "data.ranked[0].score",
        "finite",
    ),
    ("tool_choice.pick", {"confidence": float("-inf")}, "data.confidence", "finite"),
    ("tool_choice.pick", {"latencyMs": -0.5}, "data.latencyMs", ">= 0"),
    ("tool_choice.pick", {"narrowed": "yes"}, "data.narrowed", "true or false"),
    ("tool_choice.pick", {"narrowed": 1}, "data.narrowed", "true or false"),
    (
        "tool_choice.pick",
        {"narrowedSkipped": "too-many"},
        "data.narrowedSkipped",
        "after-miss, too-few, unavailable, wrap-up",
    ),
    ("tool_choice.pick", {"usage": {"inputTokens": -1}}, "data.usage.inputTokens", ">= 0"),
    ("tool_choice.pick", _without("served"), "data.served", "is required"),
    # pick_error
    ("tool_choice.pick_error", _without("message"), "data.message", "is required"),
    ("tool_choice.pick_error", {"status": 99}, "data.status", ">= 100"),
    ("tool_choice.pick_error", {"classifier": {}}, "data.classifier.name", "is required"),
    ("tool_choice.pick_error", {"narrowedSkipped": "never"}, "data.narrowedSkipped", "one of"),
    # outcome
    ("tool_choice.outcome", {"called": [1]}, "data.called[0]", "must be a string"),
    ("tool_choice.outcome", {"firstAgrees": "true"}, "data.firstAgrees", "true or false"),
    ("tool_choice.outcome", {"miss": {}}, "data.miss.wanted", "is required"),
    # model_selection
    ("model_selection", {"action": "switch"}, "data.action", "continue, select, stop"),
    ("model_selection", _without("default_model"), "data.default_model", "is required"),
    (
        "model_selection",
        {"request_patch": {"temperature": "hot"}},
        "data.request_patch.temperature",
        "must be a number",
    ),
    (
        "model_selection",
        {"capabilities": {"accepts_forced_tool_choice": "no"}},
        "data.capabilities.accepts_forced_tool_choice",
        "true or false",
    ),
    ("model_selection", {"step": 2**31}, "data.step", "<= 2147483647"),
    # turn
    ("turn", {"protocol": "xml"}, "data.protocol", "envelope, hybrid, implicit"),
    ("turn", {"toolCalls": [{"arguments": {}}]}, "data.toolCalls[0].name", "is required"),
    ("turn", {"toolNameMap": {"a": 1}}, "data.toolNameMap.a", "must be a string"),
    (
        "turn",
        {"controlToolMap": {"ask": {"kind": "subAgent"}}},
        "data.controlToolMap.ask.name",
        "required for a subAgent",
    ),
    (
        "turn",
        {"controlToolMap": {"ask": {"kind": "handoff"}}},
        "data.controlToolMap.ask.kind",
        "chat, payloadChange, subAgent, taskComplete",
    ),
    ("turn", {"durationMs": -1}, "data.durationMs", ">= 0"),
    # classifier.verdict
    ("classifier.verdict", {"rung": 2}, "data.rung", "<= 1"),
    ("classifier.verdict", {"seat": "high"}, "data.seat", "low, off, think"),
    ("classifier.verdict", {"outcome": "maybe"}, "data.outcome", "one of"),
    ("classifier.verdict", {"station": "root"}, "data.station", "ancestor, leg"),
    ("classifier.verdict", {"reask": None}, "data.reask", "true or false"),
    ("classifier.verdict", _without("wallMs"), "data.wallMs", "is required"),
    # notice
    ("notice", {"code": "nodots"}, "data.code", "dotted code"),
    ("notice", {"level": "fatal"}, "data.level", "debug, error, info, warn"),
    ("notice", {"audience": "everyone"}, "data.audience", "one of"),
    ("notice", _without("detail"), "data.detail", "is required"),
    (
        "notice",
        {"detail": {"model": "qwen3-8b", "streak": "two"}},
        "data.detail.streak",
        "must be an integer",
    ),
    (
        "notice",
        {"code": "classifier.role_defaulted", "detail": {"reason": "whim", "model": "m"}},
        "data.detail.reason",
        "role_unresolvable",
    ),
    (
        "notice",
        {"code": "classifier.unavailable", "detail": {"toolName": "t"}},
        "data.detail.toolCallId",
        "is required",
    ),
    (
        "notice",
        {"code": "route.fallback_to_primary", "detail": {"seat": "c", "to": "m", "cause": "x"}},
        "data.detail.from",
        "is required",
    ),
    # provider.error
    ("provider.error", {"retryable": "no"}, "data.retryable", "true or false"),
    ("provider.error", {"toolChoice": {"name": "present"}}, "data.toolChoice.type", "is required"),
    ("provider.error", _without("provider"), "data.provider", "is required"),
    # reliability
    ("reliability", {"type": "exploded"}, "data.type", "circuit_changed"),
    ("reliability", {"state": "ajar"}, "data.state", "closed, half-open, open"),
    (
        "reliability",
        {"type": "retried", "state": None},
        "data.attempt",
        "required when type is retried",
    ),
    ("reliability", {"state": None}, "data.state", "required when type is circuit_changed"),
    ("reliability", {"errorKind": "bad"}, "data.errorKind", "rate-limit"),
    # model_call
    ("model_call", {"usage": {"input": 1}}, "data.usage.output", "is required"),
    ("model_call", {"durationMs": float("nan")}, "data.durationMs", "finite"),
    (
        "model_call",
        {"usage": {"input": 1, "output": 2, "thinking": -3}},
        "data.usage.thinking",
        ">= 0",
    ),
]


@pytest.mark.parametrize(("kind", "change", "path", "words"), REJECTIONS)
def test_it_rejects_a_broken_field_by_its_path(kind, change, path, words):
    raw = record(kind)
    if callable(change):
        change(raw)
    else:
        raw["data"].update(change)
    errors = check(raw)
    assert isinstance(errors, dict), f"accepted: {raw}"
    assert path in errors, errors
    assert words in " ".join(errors[path])


# A record that breaks a promise of its framework is stored and flagged, not rejected.
# (kind, data overrides, the violation codes in derived.violations)
VIOLATIONS = [
    (
        "tool_choice.pick",
        {"ranked": [{"name": "grep", "score": 0.1}, {"name": "search_docs", "score": 0.6}]},
        ["ranked_scores_rising"],
    ),
    ("tool_choice.pick", {"chosen": "send_email"}, ["chosen_not_offered"]),
    (
        "tool_choice.pick",
        {"ranked": [{"name": "search_docs", "score": 0.6}, {"name": "send_email", "score": 0.2}]},
        ["ranked_not_offered"],
    ),
    (
        "tool_choice.pick",
        {"ranked": [{"name": "grep", "score": 0.6}, {"name": "grep", "score": 0.2}]},
        ["ranked_repeated"],
    ),
    (
        "tool_choice.pick",
        # grep comes after search_docs in offered: a tie must keep that order.
        {"ranked": [{"name": "grep", "score": 0.5}, {"name": "search_docs", "score": 0.5}]},
        ["ranked_tie_out_of_order"],
    ),
    (
        "tool_choice.pick",
        {"narrowed": False, "served": ["search_docs", "read_file"]},
        ["unnarrowed_tool_not_served"],
    ),
    ("tool_choice.pick", {"narrowedSkipped": "too-few"}, ["skipped_while_narrowed"]),
    (
        "tool_choice.pick",
        {"chosen": "send_email", "narrowedSkipped": "too-few"},
        ["chosen_not_offered", "skipped_while_narrowed"],
    ),
    ("classifier.verdict", {"verdict": None}, ["ruled_without_verdict"]),
    (
        "classifier.verdict",
        {"outcome": "parse_error", "form": "missing"},
        ["verdict_without_ruling"],
    ),
    ("classifier.verdict", {"form": "missing"}, ["form_without_parse_error"]),
    (
        "classifier.verdict",
        {"cause": "timeout", "disposition": "asked"},
        ["cause_without_unavailable", "disposition_without_unavailable"],
    ),
]


@pytest.mark.parametrize(("kind", "change", "codes"), VIOLATIONS)
def test_it_stores_a_broken_contract_and_flags_it(kind, change, codes):
    raw = record(kind)
    raw["data"].update(change)
    result = check(raw)
    assert isinstance(result, NormalisedRecord), result
    assert result.has_violation
    assert orjson.loads(result.derived_json)["violations"] == codes


@pytest.mark.parametrize("kind", KINDS)
def test_a_record_that_keeps_its_contract_has_no_violations(kind):
    result = check(record(kind))
    assert not result.has_violation
    assert "violations" not in orjson.loads(result.derived_json)


def test_it_reports_every_error_of_a_record_not_only_the_first():
    raw = record("tool_choice.pick")
    raw["data"]["ranked"][1]["score"] = "high"
    raw["data"]["latencyMs"] = -3
    raw["data"]["narrowed"] = "yes"
    del raw["data"]["served"]
    raw["agent"] = 7
    errors = check(raw)
    assert set(errors) == {
        "agent",
        "data.ranked[1].score",
        "data.latencyMs",
        "data.narrowed",
        "data.served",
    }, errors
    assert "must be a number" in errors["data.ranked[1].score"][0]
    assert ">= 0" in errors["data.latencyMs"][0]
    assert errors["data.served"] == ["is required"]


def test_it_names_each_bad_item_of_an_array():
    raw = record("turn", data={"toolCalls": [{"name": 1}, {"name": "ok"}, {}]})
    errors = check(raw)
    assert set(errors) == {"data.toolCalls[0].name", "data.toolCalls[2].name"}, errors


ENVELOPE_REJECTIONS = [
    ({"kind": "tool_choice.guess"}, "kind", "one of: tool_choice.pick"),
    ({"kind": None}, "kind", "is required"),
    ({"run_id": None}, "run_id", "is required"),
    ({"run_id": ""}, "run_id", "must not be empty"),
    ({"run_id": "r" * 201}, "run_id", "at most 200"),
    ({"id": "i" * 201}, "id", "at most 200"),
    ({"agent": 7}, "agent", "must be a string"),
    ({"release": 7}, "release", "must be a string"),
    ({"release": ["v1"]}, "release", "must be a string"),
    ({"release": ""}, "release", "must not be empty"),
    ({"release": "v" * 201}, "release", "at most 200"),
    ({"release": "v1\nv2"}, "release", "must not contain control characters"),
    ({"release": "v1\n"}, "release", "must not contain control characters"),
    ({"release": "v1\tbeta"}, "release", "must not contain control characters"),
    ({"release": "v1\x00"}, "release", "must not contain control characters"),
    ({"release": "v1\x7f"}, "release", "must not contain control characters"),
    ({"release": "v1\x9b"}, "release", "must not contain control characters"),
    ({"parent_run_id": "p" * 201}, "parent_run_id", "at most 200"),
    ({"session_id": ["s"]}, "session_id", "must be a string"),
    ({"ts": None}, "ts", "is required"),
    ({"ts": "2026-11-20T09:00:00"}, "ts", "with an offset"),
    ({"ts": "yesterday"}, "ts", "RFC 3339"),
    ({"ts": "2026-11-20T10:05:01Z"}, "ts", "in the future"),
    ({"data": None}, "data", "is required"),
    ({"data": []}, "data", "must be an object"),
    ({"runId": "r"}, "runId", "not a field of the record envelope"),
]


@pytest.mark.parametrize(("change", "path", "words"), ENVELOPE_REJECTIONS)
def test_it_rejects_a_broken_envelope(change, path, words):
    raw = record("model_selection")
    raw.update(change)
    raw = {k: v for k, v in raw.items() if v is not None}
    errors = check(raw)
    assert isinstance(errors, dict), raw
    assert words in " ".join(errors[path]), errors


def test_it_accepts_a_timestamp_just_inside_the_future_allowance():
    result = check(record(ts="2026-11-20T10:04:59+00:00"))
    assert isinstance(result, NormalisedRecord)


def test_it_stores_timestamps_in_utc_whatever_the_offset():
    result = check(record(ts="2026-11-20T11:30:00+02:00"))
    assert result.ts == datetime(2026, 11, 20, 9, 30, tzinfo=UTC)


@pytest.mark.parametrize("value", [[1], "text", 3, None])
def test_it_rejects_a_record_that_is_not_an_object(value):
    assert "record" in check(value)


def test_it_rejects_data_over_the_size_limit():
    raw = record("turn", data={"text": "x" * 2000})
    errors = check(raw, limits=Limits(max_data_bytes=1000))
    assert "limit is 1,000" in errors["data"][0]


def test_it_accepts_a_notice_with_an_unknown_code_and_any_detail():
    result = check(record("notice", data={"code": "engine.custom_thing", "detail": {"x": [1]}}))
    assert isinstance(result, NormalisedRecord)


def test_it_replaces_nul_characters_in_data_and_says_where_when_asked_to_scrub():
    raw = record("turn", data={"text": "a\x00b", "extra": {"k\x00": "v"}})
    result = check(raw, scrub=True)
    assert "\\u0000" not in result.data_json and "\x00" not in result.data_json
    assert "a\ufffdb" in result.data_json
    assert '"nul_replaced":["data.text","data.extra.k\ufffd"]' in result.derived_json


def test_it_rejects_nul_characters_in_envelope_identifiers():
    errors = check(record(run_id="run\x001"), scrub=True)
    assert errors == {"run_id": ["must not contain a NUL character"]}


def test_it_rejects_non_finite_numbers_in_undeclared_fields_when_scrubbing():
    errors = check(record("model_call", data={"extra": [1.0, float("inf")]}), scrub=True)
    assert errors == {"data.extra[1]": ["must be a finite number"]}


def test_it_keys_a_record_without_id_by_a_hash_of_its_canonical_form():
    a = record("model_call", id=None, ts="2026-11-20T09:00:00Z")
    b = dict(a, ts="2026-11-20T10:00:00+01:00")  # the same instant
    b["data"] = dict(reversed(list(a["data"].items())))  # the same object, keys reordered
    key_a, key_b = check(a).record_key, check(b).record_key
    assert key_a.startswith("sha256:") and key_a == key_b
    c = record("model_call", id=None, ts="2026-11-20T09:00:00Z", data={"durationMs": 1.0})
    assert check(c).record_key != key_a


def test_it_uses_the_posted_id_as_the_key():
    assert check(record(id="abc-1")).record_key == "abc-1"


def test_it_never_raises_on_arbitrary_junk():
    junk = [
        {},
        {"kind": 5},
        {"kind": "turn"},
        {"kind": "turn", "data": {"toolCalls": [None]}},
        {
            "kind": "notice",
            "run_id": "r",
            "ts": "2026-11-20T09:00:00Z",
            "data": {"code": "a.b", "message": "m", "detail": "x"},
        },
        {
            "kind": "turn",
            "run_id": "r",
            "ts": "2026-11-20T09:00:00Z",
            "data": {"toolCalls": {"a": 1}},
        },
    ]
    for raw in junk:
        assert isinstance(check(raw), dict)


def test_it_rejects_a_timestamp_from_a_zeroed_clock():
    errors = check(record(ts="1970-01-01T00:00:00Z"))
    assert "before 2000-01-01" in errors["ts"][0]


RACE = """
import sys, threading
from datetime import UTC, datetime, timedelta

from records.demo.generator import generate_records

records = list(generate_records(records=300, runs=3, seed=1, end=datetime.now(UTC),
                                span=timedelta(minutes=30)))
# imports records.contract.schema, as a web worker's first batch
from records.contract.normalise import normalise

sys.setswitchinterval(0.0001)  # threads interleave as densely as they can
start = threading.Barrier(8)


def batch():
    start.wait()
    for raw in records:
        normalise(raw, now=datetime.now(UTC))


threads = [threading.Thread(target=batch) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
"""


def test_threads_of_a_fresh_process_validate_their_first_records_together():
    """A fresh web worker's threads validating their first batches at once: with msgspec 0.20
    each process died of a SIGSEGV as two threads built the same Struct's info (20 of 20 runs
    of this script, before records.contract.schema built them on import)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    for _ in range(4):  # each run a fresh interpreter: msgspec's info is built once a process
        done = subprocess.run(
            [sys.executable, "-c", RACE], cwd=root, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, (done.returncode, done.stderr[-2000:])

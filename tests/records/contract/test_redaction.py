"""The detectors and the redactor (records.contract.detectors, records.contract.redaction), as
docs/operations.md ("Redaction") states them: pure functions, no database."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import orjson
import pytest

from records.contract.detectors import iban_ok, luhn_ok
from records.contract.normalise import NormalisedRecord, normalise
from records.contract.redaction import PLANS, Redactor, Rules
from records.redaction_syntax import BUILT_IN, CARDS, SECRETS, PatternError, compile_pattern
from tests.support.factories import record
from tests.support.redaction_corpus import LOOK_ALIKES, corpus

NOW = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)
EVERY = Redactor(Rules(detectors=BUILT_IN))
DEFAULTS = Redactor(Rules(detectors=(*SECRETS, *CARDS)))


def judged(raw: dict, redactor: Redactor = EVERY) -> NormalisedRecord:
    result = normalise(raw, now=NOW, redactor=redactor)
    assert isinstance(result, NormalisedRecord), result
    return result


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_it_redacts_every_planted_value_and_keeps_every_look_alike(seed):
    for planted in corpus(seed):
        stored = judged(planted.raw)
        assert planted.gone and planted.kept
        for value in planted.gone:
            assert value not in stored.data_json, (value, stored.data_json)
            assert value not in stored.derived_json
        for value in planted.kept:
            assert value in stored.data_json, (value, stored.data_json)
        assert orjson.loads(stored.derived_json)["redacted"] == dict(planted.counts)
        assert stored.redacted == dict(planted.counts)
        for detector in planted.counts:
            assert f"[REDACTED:{detector}]" in stored.data_json


def test_personal_data_is_kept_unless_the_project_opts_in():
    for planted in corpus(4, personal=False):
        stored = judged(planted.raw, DEFAULTS)
        for value in planted.gone:
            assert value not in stored.data_json
        for value in planted.kept:
            assert value in stored.data_json
        assert set(planted.counts) <= {*SECRETS, *CARDS}


def test_a_record_without_a_find_is_stored_as_without_redaction():
    raw = record("turn", data={"text": " ".join(LOOK_ALIKES)})
    with_rules, without = judged(raw), judged(raw, None)
    assert with_rules.data_json == without.data_json
    assert with_rules.record_key == without.record_key
    assert "redacted" not in orjson.loads(with_rules.derived_json)
    assert with_rules.redacted is None


def test_names_ids_and_codes_are_not_free_text():
    email = "dana.whitfield@northwind-example.com"
    raw = record(
        "turn",
        data={"text": f"mail {email}", "toolCalls": [{"name": email, "arguments": {}}]},
        run_id=email,
        agent=email,
    )
    stored = judged(raw)
    assert stored.run_id == email and stored.agent == email
    data = orjson.loads(stored.data_json)
    assert data["toolCalls"][0]["name"] == email
    assert data["text"] == "mail [REDACTED:email]"
    assert PLANS["classifier.verdict"].active == ()  # names, closed values and numbers
    turn = dict(PLANS["turn"].active)
    assert turn["text"] == "text" and turn["executionError"] == "json"
    shape, call = turn["toolCalls"]
    assert shape == "list" and call.active == (("arguments", "json"),)
    assert "toolNameMap" not in turn  # names to names


def test_undeclared_fields_of_nested_objects_are_scanned_too():
    key = "AKIAZ7Q3L9M2N8P4X6RT"
    raw = record(
        "tool_choice.pick",
        data={"ranked": [{"name": "search_docs", "score": 0.9, "why": f"key {key}"}]},
    )
    stored = judged(raw)
    assert key not in stored.data_json
    assert orjson.loads(stored.data_json)["ranked"][0]["why"] == "key [REDACTED:aws]"


def test_it_reaches_into_nested_tool_arguments_and_undeclared_fields():
    key = "sk-proj-Zq4Lm8Nw2Xc7Vb1Rt6Yu3Pk9Hs5Dg0Fa"
    raw = record(
        "turn",
        data={
            "toolCalls": [{"name": "call", "arguments": {"a": [{"b": {"c": [f"x {key}"]}}]}}],
            "executionError": {"stack": [f"env OPENAI_API_KEY={key}"]},
            "vendor": {"deep": [[key]]},
        },
    )
    stored = judged(raw)
    assert key not in stored.data_json
    assert stored.redacted == {"openai": 3}


def test_a_json_envelope_in_a_turn_stays_json_and_keeps_its_decision():
    text = orjson.dumps(
        {"nextStep": {"type": "chat"}, "message": 'use "api_key": "Zx9Qw2Er7Ty4Ui1Op" now'}
    ).decode()
    stored = judged(record("turn", data={"protocol": "envelope", "text": text, "toolCalls": []}))
    envelope = orjson.loads(orjson.loads(stored.data_json)["text"])
    assert "Zx9Qw2Er7Ty4Ui1Op" not in stored.data_json
    assert envelope["message"] == 'use "api_key": "[REDACTED:assignment]" now'
    assert orjson.loads(stored.derived_json)["decision"] == "chat"


def test_a_key_in_an_assignment_counts_as_its_format():
    counts: dict[str, int] = {}
    text = EVERY.text("OPENAI_API_KEY=sk-proj-Zq4Lm8Nw2Xc7Vb1Rt6Yu3Pk9Hs5Dg0Fa", counts)
    assert text == "OPENAI_API_KEY=[REDACTED:openai]" and counts == {"openai": 1}


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("DB_PASSWORD=hunter2x9", "DB_PASSWORD=[REDACTED:assignment]"),
        (
            "export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "export AWS_SECRET_ACCESS_KEY=[REDACTED:assignment]",
        ),
        ("{'client_secret': 'Q2x9vLm4Tz7w'}", "{'client_secret': '[REDACTED:assignment]'}"),
        ("mytoken=abcdef123456", "mytoken=abcdef123456"),  # not a name, a word
        ("max_tokens: 40960000", "max_tokens: 40960000"),
        ("token: required", "token: required"),
    ],
)
def test_secrets_assigned_to_a_name(text, redacted):
    assert EVERY.text(text, {}) == redacted


def test_a_bearer_token_keeps_its_scheme():
    counts: dict[str, int] = {}
    assert (
        EVERY.text("Authorization: Bearer 8f3Kq9Lz2Wm7Xv4Nc1Tb6Ry5Hs0Pd", counts)
        == "Authorization: Bearer [REDACTED:bearer]"
    )


def test_a_json_key_rule_redacts_the_whole_value_in_any_case():
    redactor = Redactor(Rules(detectors=(), keys=("password", "ssn")))
    raw = record(
        "turn",
        data={
            "toolCalls": [
                {"name": "login", "arguments": {"user": "dana", "Password": {"plain": "x1"}}},
                {"name": "form", "arguments": [{"SSN": 123456789}, {"ssn_hint": "last four"}]},
            ],
            "password": "top-level undeclared",
        },
    )
    stored = judged(raw, redactor)
    data = orjson.loads(stored.data_json)
    assert data["toolCalls"][0]["arguments"] == {"user": "dana", "Password": "[REDACTED:key]"}
    assert data["toolCalls"][1]["arguments"] == [
        {"SSN": "[REDACTED:key]"},
        {"ssn_hint": "last four"},
    ]
    assert data["password"] == "[REDACTED:key]"
    assert stored.redacted == {"key": 3}


def test_a_projects_own_pattern_is_applied_with_its_name():
    redactor = Redactor(Rules(patterns=(("customer-id", r"CUST-\d{6}"),)))
    stored = judged(record("notice", data={"message": "for CUST-004211 and CUST-12"}), redactor)
    assert orjson.loads(stored.data_json)["message"] == "for [REDACTED:customer-id] and CUST-12"
    assert stored.redacted == {"customer-id": 1}
    counts: dict[str, int] = {}
    short = Redactor(Rules(patterns=(("pin", r"\bP\d{3}\b"),))).text("P042", counts)
    assert short == "[REDACTED:pin]" and counts == {"pin": 1}  # shorter than any built-in's


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (r"^(a+)+\1$", "backreferences"),  # a backreference: exponential in a backtracking engine
        (r"(?=(a+))\1b", "lookaround"),
        (r"(?<!x)secret", "lookaround"),
        (r"((a{100}){100}){100}", "invalid repetition size"),
        (r"(", r"missing \)"),
        (r"a*", "matches the empty text"),
        ("", "empty"),
        ("x" * 1001, "longer than 1000"),
    ],
)
def test_a_pattern_ingest_could_not_run_safely_is_refused(pattern, reason):
    with pytest.raises(PatternError, match=reason):
        compile_pattern(pattern)


def test_nested_quantifiers_run_in_linear_time_on_re2():
    """`(a+)+$` takes exponential time in a backtracking engine on a run of a's ending in a
    b; RE2 has no backtracking, so the pattern is safe and accepted."""
    pattern = compile_pattern(r"(a+)+$")
    text = "a" * 200_000 + "b"
    started = time.perf_counter()
    counts: dict[str, int] = {}
    Redactor(Rules(patterns=(("as", r"(a+)+$"),))).text(text, counts)
    assert pattern.search(text) is None and counts == {}
    assert time.perf_counter() - started < 2


def test_the_check_digits():
    assert luhn_ok("4111111111111111") and not luhn_ok("4111111111111112")
    assert luhn_ok("378282246310005") and not luhn_ok("5105105105105101")
    assert iban_ok("DE89 3704 0044 0532 0130 00") and not iban_ok("DE89 3704 0044 0532 0130 01")
    assert iban_ok("FR1420041010050500013M02606") and not iban_ok("FR1420041010050500013M02607")


def test_it_refuses_an_unknown_detector():
    with pytest.raises(ValueError, match="unknown detectors"):
        Redactor(Rules(detectors=("ssn",)))


def test_a_text_found_clean_is_remembered_and_a_find_is_counted_every_time(monkeypatch):
    from records.contract import redaction

    redactor = Redactor(Rules(detectors=(*SECRETS, *CARDS)))
    key = "sk-proj-" + "a1B2" * 8
    for _ in range(3):
        counts: dict[str, int] = {}
        assert redactor.text(f"key {key}", counts) == "key [REDACTED:openai]"
        assert redactor.text("gpt-4o-mini", counts) == "gpt-4o-mini"
        assert counts == {"openai": 1}
    # What a lookup answers is what the detectors would: the scan runs once per clean text.
    scanned: list[str] = []
    scan = redactor.scanner.redact
    monkeypatch.setattr(redactor.scanner, "redact", lambda t, c: scanned.append(t) or scan(t, c))
    for _ in range(3):
        redactor.text("tool-calls", {})
        redactor.text(f"key {key}", {})
    assert scanned == ["tool-calls", f"key {key}", f"key {key}", f"key {key}"]
    # A text too long to remember is scanned each time.
    long = "x " * redaction.MAX_CLEAN_TEXT_CHARS
    redactor.text(long, {})
    redactor.text(long, {})
    assert scanned.count(long) == 2


def test_the_texts_a_redactor_remembers_stay_bounded(monkeypatch):
    from records.contract import redaction

    monkeypatch.setattr(redaction, "MAX_CLEAN_TEXTS", 50)
    redactor = Redactor(Rules(detectors=BUILT_IN))
    for i in range(500):
        assert redactor.text(f"order {i}", {}) == f"order {i}"
    scanned: list[str] = []
    scan = redactor.scanner.redact
    monkeypatch.setattr(redactor.scanner, "redact", lambda t, c: scanned.append(t) or scan(t, c))
    # Forgotten all at once when full: the texts of the moment are remembered, older ones not.
    redactor.text("order 499", {})
    redactor.text("order 0", {})
    assert scanned == ["order 0"]

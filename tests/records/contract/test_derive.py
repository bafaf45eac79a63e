"""The derived fields, computed on ingest."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from records.contract import rollup_keys
from records.contract.normalise import NormalisedRecord, normalise
from tests.support.factories import record

NOW = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)


def derived(kind, **data):
    result = normalise(record(kind, data=data), now=NOW)
    return result, json.loads(result.derived_json)


def test_it_derives_doors_as_served_minus_offered_in_served_order():
    _, d = derived(
        "tool_choice.pick",
        offered=["a", "b", "c"],
        ranked=[],
        chosen="a",
        served=["a", "list_skills", "b", "present"],
    )
    assert d["doors"] == ["list_skills", "present"]


def test_it_facets_a_pick_by_classifier_model_latency_and_skip_reason():
    r, _ = derived("tool_choice.pick", narrowed=False, narrowedSkipped="after-miss")
    assert (r.model, r.latency_ms, r.skip_reason, r.iteration) == (
        "claude-haiku-4-5",
        140.5,
        "after-miss",
        0,
    )


def test_it_marks_a_pick_error_as_an_error():
    r, _ = derived("tool_choice.pick_error")
    assert r.is_error and r.skip_reason == "unavailable" and r.model is None


@pytest.mark.parametrize(
    ("default", "selected", "previous", "swap", "switch"),
    [
        ("sonnet", "sonnet", None, False, False),
        ("sonnet", "haiku", None, True, False),
        ("sonnet", "haiku", "sonnet", True, True),
        ("sonnet", "haiku", "haiku", True, False),
        ("sonnet", "sonnet", "haiku", False, True),
    ],
)
def test_it_derives_swap_and_switch(default, selected, previous, swap, switch):
    data = {"default_model": default, "selected_model": selected}
    if previous:
        data["previous_model"] = previous
    r, d = derived("model_selection", **data)
    assert (d["swap"], d["switch"], r.is_swap) == (swap, switch, swap)
    assert r.model == default and d["selected_model"] == selected


def test_it_maps_turn_calls_to_action_names_and_flags_invented_ones():
    r, d = derived(
        "turn",
        protocol="envelope",
        toolCalls=[{"name": "send_email"}, {"name": "refund_now"}],
        toolNameMap={"send_email": "Send Email"},
    )
    assert d["calls"] == [
        {"wire": "send_email", "action": "Send Email", "invented": False},
        {"wire": "refund_now", "action": "refund_now", "invented": True},
    ]
    assert d["invented"] == ["refund_now"] and d["decision"] == "action"


def test_it_lets_a_control_call_decide_the_turn():
    _, d = derived(
        "turn",
        toolCalls=[{"name": "search-docs"}, {"name": "ask_billing"}],
        controlToolMap={"ask_billing": {"kind": "subAgent", "name": "billing-agent"}},
    )
    assert d["decision"] == "subAgent"
    assert d["calls"][1] == {"wire": "ask_billing", "control": "subAgent"}
    assert d["invented"] == []


@pytest.mark.parametrize(
    ("protocol", "text", "decision"),
    [
        ("implicit", "The refund was issued.", "taskComplete"),
        # Under hybrid every text follows the envelope rules: plain text is no envelope.
        ("hybrid", "Which order do you mean?", "unparseable"),
        ("hybrid", '{"taskComplete": true}', "taskComplete"),
        ("hybrid", '{"nextStep": {"type": "Sub-Agent"}}', "subAgent"),
        (None, '{"taskComplete": true, "message": "done"}', "taskComplete"),
        ("envelope", '{"nextStep": {"type": "Sub-Agent"}}', "subAgent"),
        ("envelope", '{"nextStep": {"type": "Actions"}}', "action"),
        ("envelope", '{"nextStep": {"type": "Chat"}}', "chat"),
        ("envelope", '{"nextStep": {"type": "ForEach"}}', "other"),
        ("envelope", '{"payloadChangeRequest": {"newElements": {}}}', "payloadChange"),
        ("envelope", "not json at all", "unparseable"),
        ("envelope", "", "empty"),
        ("implicit", "   ", "empty"),
    ],
)
def test_it_classifies_a_turn_without_calls(protocol, text, decision):
    data = {"text": text, "toolCalls": None, "toolNameMap": None, "protocol": protocol}
    raw = record("turn", data=data)
    raw["data"] = {k: v for k, v in raw["data"].items() if v is not None}
    result = normalise(raw, now=NOW)
    d = json.loads(result.derived_json)
    assert d["decision"] == decision and result.outcome == decision
    assert d["protocol"] == (protocol or "envelope")


def test_it_does_not_call_names_invented_when_the_harness_sent_no_map():
    _, d = derived("turn", toolCalls=[{"name": "grep"}], toolNameMap=None)
    assert d["calls"] == [{"wire": "grep", "action": "grep", "invented": False}]


@pytest.mark.parametrize(
    ("rung", "reask", "fallback"), [(0, False, False), (1, False, True), (1, True, False)]
)
def test_it_flags_a_ladder_fallback_on_a_first_attempt_at_rung_one(rung, reask, fallback):
    r, d = derived("classifier.verdict", rung=rung, reask=reask)
    assert d["ladder_fallback"] is fallback and r.is_fallback is fallback


def test_it_groups_verdicts_by_seat_model_or_model_and_counts_the_mix():
    r, d = derived("classifier.verdict", seatModel=None, model="m1")
    assert d["seat_model"] == "m1" and r.outcome == "allow"
    r, _ = derived("classifier.verdict", outcome="parse_error", verdict=None, form="missing")
    assert r.outcome == "parse_error" and r.is_contract_break
    r, _ = derived("classifier.verdict", outcome="unavailable", verdict=None, cause="timeout")
    assert r.outcome == "unavailable" and not r.is_contract_break


def test_it_flags_notices_by_code():
    r, _ = derived("notice")
    assert r.is_contract_break and r.model == "qwen3-8b"
    r, _ = derived(
        "notice",
        code="route.fallback_to_primary",
        detail={"seat": "c", "from": "a", "to": "b", "cause": "x"},
    )
    assert r.is_fallback and not r.is_contract_break
    r, d = derived("notice", code="engine.other", level="error", detail={})
    assert r.is_error and d["known_code"] is False


def test_it_flags_refused_forced_tool_choices():
    r, d = derived("provider.error")
    assert d["tool_choice_refused"] and r.is_error and r.model == "claude-opus-5-5"
    r, d = derived("provider.error", error="RateLimitError", toolChoice=None)
    assert not d["tool_choice_refused"]


@pytest.mark.parametrize(
    ("error", "status", "retryable", "refused"),
    [
        # A refusal is named as such, or a 400 that cannot be retried, carrying the tool choice.
        ("UnsupportedToolChoiceError", None, True, True),
        ("BadRequestError", 400, False, True),
        # An overload that carried a tool choice is not a refusal.
        ("OverloadedError", 529, True, False),
        ("BadRequestError", 400, True, False),
        ("RateLimitError", 429, False, False),
    ],
)
def test_a_refusal_of_a_forced_tool_choice_is_what_the_design_says(
    error, status, retryable, refused
):
    r, d = derived(
        "provider.error",
        error=error,
        status=status,
        retryable=retryable,
        toolChoice={"type": "any"},
    )
    assert d["tool_choice_refused"] is refused
    assert r.rollup_key.endswith(f"|{int(refused)}")


def test_a_selection_names_its_default_selected_and_previous_models():
    r, _ = derived(
        "model_selection", default_model="big", selected_model="small", previous_model="mid"
    )
    assert r.model == "big" and r.named_models == "|big|small|mid|"
    r, _ = derived("model_selection", default_model="big", selected_model="big")
    assert r.named_models is None  # names nothing but its own model


def test_a_verdict_names_its_seat_model():
    r, _ = derived("classifier.verdict", model="main", seatModel="seat")
    assert r.model == "main" and r.named_models == "|main|seat|"


def test_it_sums_model_call_tokens_and_keeps_the_duration():
    r, d = derived("model_call")
    assert d["total_tokens"] == 9300 and r.latency_ms == 1800.0 and r.outcome == "toolUse"


def test_it_flags_reliability_fallbacks_and_fail_fast_errors():
    r, _ = derived("reliability", type="fallback_triggered", state=None)
    assert r.is_fallback and not r.is_error
    r, _ = derived("reliability", type="fail_fast", state=None)
    assert r.is_error


def test_it_files_a_fallback_notice_under_the_model_that_fell_back():
    r, _ = derived(
        "notice",
        code="classifier.fallback",
        detail={"from": "qwen3-8b", "to": "claude-sonnet-4-5", "cause": "parse_error"},
    )
    assert r.model == "qwen3-8b" and r.is_fallback


# --- hybrid turns read as envelope turns ---------------------------------------------------------
# Under `hybrid` a turn keeps the envelope rules for every text, with or without calls: only
# `implicit` reads plain text its own way. So a hybrid turn's derived fields are the envelope
# turn's, but for the protocol it names.
_STEP_TYPES = st.one_of(
    st.sampled_from(["Actions", "Sub-Agent", "sub-agent", "Chat", "ForEach"]),
    st.text(max_size=8),
    st.integers(),
)
_ENVELOPES = st.fixed_dictionaries(
    {},
    optional={
        "taskComplete": st.one_of(st.booleans(), st.none(), st.sampled_from([1, "true"])),
        "nextStep": st.one_of(
            st.fixed_dictionaries({"type": _STEP_TYPES}),
            st.text(max_size=8),
            st.none(),
        ),
        "payloadChangeRequest": st.one_of(st.none(), st.just({}), st.just({"newElements": {}})),
        "message": st.text(max_size=20),
    },
)
_SPACE = st.sampled_from(["", " ", "\n\t", "\u00a0", "\u2003", "\ufeff"])
_JSONISH = st.sampled_from([
    "{", "}", "{}}", '{"taskComplete": true', "[]", '[{"taskComplete": true}]', "42", "null",
    "true", '"{\\"taskComplete\\": true}"', "{'taskComplete': True}", "NaN", "{taskComplete}",
])  # fmt: skip
_TEXTS = st.one_of(
    st.none(),
    st.text(max_size=40),  # plain text, any unicode
    st.sampled_from(["", " ", "\n", "Which order do you mean?", "Done. The refund was issued."]),
    st.tuples(_SPACE, _ENVELOPES.map(json.dumps), _SPACE).map("".join),  # a JSON object
    st.tuples(_SPACE, _JSONISH, _SPACE).map("".join),  # JSON-ish, not an object
)
_WIRE_NAMES = ("search-docs", "refund_now", "ask_user", "complete_task", "delegate")
_CONTROLS = {
    "ask_user": {"kind": "chat"},
    "complete_task": {"kind": "taskComplete"},
    "delegate": {"kind": "subAgent", "name": "billing-agent"},
}


@st.composite
def _turns(draw) -> dict:
    """The data of a turn, without its protocol: any text and any set of calls."""
    data: dict = {"durationMs": 900.0}
    text = draw(_TEXTS)
    if text is not None:
        data["text"] = text
    calls = draw(st.one_of(st.none(), st.lists(st.sampled_from(_WIRE_NAMES), max_size=4)))
    if calls is not None:
        data["toolCalls"] = [{"name": name} for name in calls]
    if draw(st.booleans()):
        data["toolNameMap"] = {"search-docs": "search_docs"}
    if draw(st.booleans()):
        data["controlToolMap"] = draw(
            st.dictionaries(st.sampled_from(list(_CONTROLS)), st.just({}), max_size=3).map(
                lambda chosen: {name: _CONTROLS[name] for name in chosen}
            )
        )
    return data


def _as_sent(data: dict, protocol: str | None) -> dict:
    raw = record("turn", id="turn-1", ts="2026-11-20T09:00:00Z")
    raw["data"] = {**data, **({"protocol": protocol} if protocol else {})}
    return raw


def _without_protocol(result) -> dict:
    """Every field normalise derives for the turn, less the protocol it was sent under."""
    out = dataclasses.asdict(result)
    derived = json.loads(out.pop("derived_json"))
    assert derived.pop("protocol") in ("envelope", "hybrid")
    key = rollup_keys.decode(rollup_keys.TURN, out.pop("rollup_key"))
    assert key.pop("protocol") in ("envelope", "hybrid")
    out.pop("data_json")  # as posted, protocol included
    return {**out, "derived": derived, "key": key}


@settings(max_examples=300, deadline=None, database=None)
@given(_turns(), st.sampled_from([None, "envelope"]))
def test_it_derives_a_hybrid_turn_exactly_as_the_envelope_turn(data, envelope):
    hybrid = normalise(_as_sent(data, "hybrid"), now=NOW)
    same = normalise(_as_sent(data, envelope), now=NOW)
    assert isinstance(hybrid, NormalisedRecord) and isinstance(same, NormalisedRecord)
    assert json.loads(hybrid.derived_json)["protocol"] == "hybrid"
    assert _without_protocol(hybrid) == _without_protocol(same)


def test_it_reads_a_hybrid_turn_of_plain_text_and_no_call_as_the_envelope_turn_does():
    text = "Could you tell me which order you mean?"
    hybrid = normalise(_as_sent({"text": text}, "hybrid"), now=NOW)
    envelope = normalise(_as_sent({"text": text}, "envelope"), now=NOW)
    assert hybrid.outcome == envelope.outcome == "unparseable"
    assert json.loads(hybrid.derived_json)["decision"] == "unparseable"
    assert rollup_keys.decode(rollup_keys.TURN, hybrid.rollup_key) == {
        "decision": "unparseable", "protocol": "hybrid", "invented": "0",
    }  # fmt: skip

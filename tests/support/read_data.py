"""A small, hand-made set of records for the read API, filter and export tests.

Three runs of alice's project (acme) with one record for each thing a filter can pick out, and
what each filter must return, written out by hand from the table below rather than computed by
the code under test. Bob's project (globex) gets a run with the same run_id as one of alice's.

    key  run    agent               session  kind                 min  model              has
    a1   run-a  support-bot         sess-1   model_selection      0    claude-sonnet-4-5  swap
    a2   run-a  support-bot         sess-1   tool_choice.pick     1    claude-haiku-4-5
    a3   run-a  support-bot         sess-1   provider.error       2    claude-opus-5-5    error
    b1   run-b  code-reviewer       sess-2   classifier.verdict   10   qwen3-8b           c_break
    b2   run-b  code-reviewer       sess-2   notice               11   (gpt-5-mini)       fallback
    b3   run-b  code-reviewer       sess-2   model_call           12   gpt-5
    c1   run-c  research-assistant  -        turn                 20   -
    c2   run-c  research-assistant  -        tool_choice.outcome  21   -

(`min` is minutes after BASE_TS; c_break is contract_break. a1 selected gpt-5; b2 fell back from
gpt-5-mini to claude-sonnet-4-5: the `model` filter matches every model a record names.)
run-b is a sub-run of run-a (parent_run_id). a1-a3 were posted with release agent-1.4.0, b1 and b2
with release sha:9f2c1e0; b3, c1 and c2 without one.
"""

from __future__ import annotations

import json
from datetime import timedelta

from records import catchup
from tests.support.factories import BASE_TS, record


def at(minutes: float) -> str:
    return (BASE_TS + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


def alice_records() -> list[dict]:
    a = {
        "run_id": "run-a",
        "agent": "support-bot",
        "session_id": "sess-1",
        "release": "agent-1.4.0",
    }
    b = {
        "run_id": "run-b",
        "agent": "code-reviewer",
        "session_id": "sess-2",
        "parent_run_id": "run-a",
    }
    c = {"run_id": "run-c", "agent": "research-assistant", "session_id": None}
    return [
        record("model_selection", id="a1", ts=at(0), data={"selected_model": "gpt-5"}, **a),
        record("tool_choice.pick", id="a2", ts=at(1), **a),
        record("provider.error", id="a3", ts=at(2), **a),
        record(
            "classifier.verdict",
            id="b1",
            ts=at(10),
            data={"outcome": "parse_error", "verdict": None, "form": "missing"},
            release="sha:9f2c1e0",
            **b,
        ),
        record(
            "notice",
            id="b2",
            ts=at(11),
            data={
                "code": "classifier.fallback",
                "message": "fell back to the main model",
                "detail": {"from": "gpt-5-mini", "to": "claude-sonnet-4-5", "cause": "timeout"},
            },
            release="sha:9f2c1e0",
            **b,
        ),
        record("model_call", id="b3", ts=at(12), data={"model": "gpt-5"}, **b),
        record("turn", id="c1", ts=at(20), **c),
        record("tool_choice.outcome", id="c2", ts=at(21), **c),
    ]


ALL = ["a1", "a2", "a3", "b1", "b2", "b3", "c1", "c2"]

# Record filters: query parameters -> the keys returned, oldest first.
RECORD_CASES: list[tuple[dict[str, str], list[str]]] = [
    ({}, ALL),
    ({"from": at(1)}, ["a2", "a3", "b1", "b2", "b3", "c1", "c2"]),
    ({"to": at(11)}, ["a1", "a2", "a3", "b1"]),  # `to` is exclusive
    ({"from": at(2), "to": at(12)}, ["a3", "b1", "b2"]),
    ({"agent": "support-bot"}, ["a1", "a2", "a3"]),
    ({"agent": "support-bot,research-assistant"}, ["a1", "a2", "a3", "c1", "c2"]),
    # Any model field names the model: a1 selected gpt-5 (its default is sonnet).
    ({"model": "gpt-5"}, ["a1", "b3"]),
    # b2, a fallback notice, fell back to sonnet.
    ({"model": "claude-sonnet-4-5,qwen3-8b"}, ["a1", "b1", "b2"]),
    ({"kind": "turn"}, ["c1"]),
    ({"kind": "notice,turn"}, ["b2", "c1"]),
    ({"run_id": "run-b"}, ["b1", "b2", "b3"]),
    ({"run_id": "run-a,run-c"}, ["a1", "a2", "a3", "c1", "c2"]),
    ({"session_id": "sess-1"}, ["a1", "a2", "a3"]),
    ({"has": "swap"}, ["a1"]),
    ({"has": "fallback"}, ["b2"]),
    ({"has": "error"}, ["a3"]),
    ({"has": "contract_break"}, ["b1"]),
    ({"has": "swap,error"}, ["a1", "a3"]),  # any of
    ({"agent": "code-reviewer", "has": "fallback,swap"}, ["b2"]),
    ({"run_id": "run-a", "kind": "model_call"}, []),
    (
        {"from": at(1), "to": at(20), "agent": "support-bot,code-reviewer", "kind": "model_call"},
        ["b3"],
    ),
    ({"session_id": "sess-1,sess-2", "model": "gpt-5,claude-haiku-4-5"}, ["a1", "a2", "b3"]),
    ({"agent": "nobody"}, []),
    ({"release": "agent-1.4.0"}, ["a1", "a2", "a3"]),
    ({"release": "agent-1.4.0, sha:9f2c1e0"}, ["a1", "a2", "a3", "b1", "b2"]),
    # b3 was posted without a release: no release filter picks it.
    ({"release": "sha:9f2c1e0", "run_id": "run-b"}, ["b1", "b2"]),
    ({"release": "sha:9f2c1e0", "agent": "support-bot"}, []),
    ({"release": "agent-1.4"}, []),  # exact values, no prefix
]

# Run filters: query parameters -> the run_ids returned, newest first (by when first seen).
RUN_CASES: list[tuple[dict[str, str], list[str]]] = [
    ({}, ["run-c", "run-b", "run-a"]),
    ({"from": at(11)}, ["run-c", "run-b"]),  # runs overlapping [from, to)
    ({"to": at(10)}, ["run-a"]),
    ({"from": at(2), "to": at(10)}, ["run-a"]),
    ({"from": at(3), "to": at(10)}, []),
    ({"agent": "code-reviewer"}, ["run-b"]),
    ({"model": "gpt-5"}, ["run-b", "run-a"]),
    ({"model": "claude-haiku-4-5,qwen3-8b"}, ["run-b", "run-a"]),
    ({"kind": "turn"}, ["run-c"]),
    ({"kind": "provider.error,tool_choice.outcome"}, ["run-c", "run-a"]),
    ({"run_id": "run-a,run-b"}, ["run-b", "run-a"]),
    ({"session_id": "sess-2"}, ["run-b"]),
    ({"has": "swap"}, ["run-a"]),
    ({"has": "error"}, ["run-a"]),
    ({"has": "fallback"}, ["run-b"]),
    ({"has": "contract_break"}, ["run-b"]),
    ({"has": "swap,fallback"}, ["run-b", "run-a"]),
    ({"agent": "support-bot", "has": "fallback"}, []),
    ({"from": at(0), "model": "gpt-5", "has": "contract_break", "session_id": "sess-2"}, ["run-b"]),
    # A run matches a release when one of its records was posted with it.
    ({"release": "sha:9f2c1e0"}, ["run-b"]),
    ({"release": "agent-1.4.0,sha:9f2c1e0"}, ["run-b", "run-a"]),
    ({"release": "agent-1.4.0", "agent": "code-reviewer"}, []),
    ({"release": "nothing-released"}, []),
]

# Malformed values: parameter -> a bad value. Each is a 400 naming that parameter.
MALFORMED: list[tuple[str, str]] = [
    ("from", "yesterday"),
    ("from", "2026-11-20T09:00:00"),  # no offset
    ("to", "2026-13-01T00:00:00Z"),
    ("kind", "tool_choice.pick,nope"),
    ("has", "swap,bogus"),
    ("agent", ",".join(f"a{i}" for i in range(51))),  # over 50 values
    ("run_id", "x" * 201),
    ("model", "m" * 201),
    ("session_id", ",".join(f"s{i}" for i in range(51))),
    ("release", "r" * 201),
    ("release", ",".join(f"v{i}" for i in range(51))),
]


def post_records(client, records: list[dict]) -> None:
    response = client.post(
        "/api/v1/records", data=json.dumps({"records": records}), content_type="application/json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["accepted"] == len(records)


def load(alice, bob) -> None:
    """Post the set through ingest, and bob's run-a, then run the workers' catch-up pass."""
    post_records(alice.client(), alice_records())
    post_records(
        bob.client(),
        [record("model_call", id="bob-1", run_id="run-a", agent="support-bot", ts=at(5))],
    )
    catchup.catch_up()

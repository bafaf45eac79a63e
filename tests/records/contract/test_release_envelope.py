"""The envelope's `release`: what the agent ran as, judged like the other envelope strings, kept
on the record, and part of the key of a record posted without an id only when it is posted."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import orjson
import pytest

from records.contract.normalise import NormalisedRecord, normalise, normalise_batch
from tests.support.factories import KINDS, record

NOW = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)


def check(raw, **kwargs):
    return normalise(raw, now=NOW, **kwargs)


@pytest.mark.parametrize("kind", KINDS)
def test_it_keeps_the_release_of_a_record_of_each_kind(kind):
    result = check(record(kind, release="agent-2.3.1+prompt.7f3a"))
    assert isinstance(result, NormalisedRecord), result
    assert result.release == "agent-2.3.1+prompt.7f3a"


@pytest.mark.parametrize(
    "release",
    [
        "9f2c1e0b7d4a6c3e8f1a2b5d7c9e0f1a2b3c4d5e",  # a git sha
        "sha256:" + "ab" * 32,  # a prompt hash
        "v1.4.0 (canary, eu-west)",  # spaces and punctuation
        "Größe-2026.11 — 試験",  # any printable Unicode
        "r" * 200,  # at the limit
        "=1+1",  # kept as posted; a CSV export neutralises it
    ],
)
def test_it_accepts_any_printable_release_up_to_200_characters(release):
    assert check(record(release=release)).release == release


def test_a_record_without_a_release_has_none():
    assert check(record()).release is None
    assert check(record(release=None)).release is None


def test_it_names_a_bad_release_among_every_other_error_of_the_record():
    raw = record("tool_choice.pick", release="v2\r\n")
    raw["data"]["latencyMs"] = -3
    raw["agent"] = 7
    errors = check(raw)
    assert errors == {
        "release": ["must not contain control characters (newlines, tabs, NUL, ...)"],
        "data.latencyMs": ["must be a finite number >= 0"],
        "agent": ["must be a string, got an integer"],
    }


def test_a_bad_release_rejects_its_record_and_keeps_the_rest_of_the_batch():
    batch = [
        (0, record(release="v1")),
        (1, record(release="v1\x00")),
        (2, record(release=3.5)),
        (3, record(release="x" * 201)),
        (4, record()),
    ]
    judged = normalise_batch(batch, now=NOW)
    assert [r.release for r in judged.valid] == ["v1", None]
    assert {tag: errors for tag, _, errors in judged.rejected} == {
        1: {"release": ["must not contain control characters (newlines, tabs, NUL, ...)"]},
        2: {"release": ["must be a string, got a number"]},
        3: {"release": ["must be at most 200 characters"]},
    }


def test_a_record_without_id_or_release_keeps_the_key_it_always_had():
    raw = record("model_call", id=None, ts="2026-11-20T09:00:00Z")
    canonical = {
        "kind": "model_call",
        "run_id": raw["run_id"],
        "ts": "2026-11-20T09:00:00+00:00",
        "session_id": raw["session_id"],
        "agent": raw["agent"],
        "parent_run_id": None,
        "data": raw["data"],
    }
    expected = hashlib.sha256(orjson.dumps(canonical, option=orjson.OPT_SORT_KEYS)).hexdigest()
    assert check(raw).record_key == f"sha256:{expected}"


def test_the_same_record_of_two_releases_is_two_records():
    base = record("model_call", id=None, ts="2026-11-20T09:00:00Z")
    keys = {
        check(dict(base)).record_key,
        check(dict(base, release="v1")).record_key,
        check(dict(base, release="v2")).record_key,
    }
    assert len(keys) == 3
    assert check(dict(base, release="v1")).record_key == check(dict(base, release="v1")).record_key

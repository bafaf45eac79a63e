"""Demo data: the generator covers every kind and situation a dashboard shows, and seed_demo
stores it through the ingest path, idempotently."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from io import StringIO

import orjson
import pytest
from django.core.management import CommandError, call_command

from records.contract.kinds import KIND_NAMES
from records.contract.normalise import NormalisedRecord, normalise
from records.contract.schema import NOTICE_DETAILS
from records.demo.generator import generate_records
from records.models import Project, Record, Run

END = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
SPAN = timedelta(days=1)
SKIP_REASONS = {"unavailable", "too-few", "after-miss", "wrap-up"}
RELIABILITY_TYPES = {"retried", "recovered", "fail_fast", "fallback_triggered", "circuit_changed"}


@pytest.fixture(scope="module")
def sample() -> list[dict]:
    return list(generate_records(records=5000, runs=100, seed=0, end=END, span=SPAN))


@pytest.fixture(scope="module")
def normalised(sample: list[dict]) -> list[NormalisedRecord]:
    results = [normalise(record, now=END) for record in sample]
    return [r for r in results if isinstance(r, NormalisedRecord)]


def data_of(sample: list[dict], kind: str) -> list[dict]:
    return [record["data"] for record in sample if record["kind"] == kind]


def test_it_yields_exactly_the_records_and_runs_asked_for(sample):
    assert len(sample) == 5000
    assert len({record["run_id"] for record in sample}) == 100


def test_it_validates_every_record_with_normalise(sample):
    errors = {}
    for record in sample:
        result = normalise(record, now=END)
        if not isinstance(result, NormalisedRecord):
            errors[record["id"]] = result
    assert errors == {}


def test_it_posts_the_envelope_shape(sample):
    envelope = {"id", "kind", "run_id", "ts", "agent", "session_id", "data"}
    for record in sample:
        assert envelope <= set(record) <= envelope | {"parent_run_id"}
        assert record["ts"].endswith("Z")


def test_it_covers_every_kind(sample):
    assert {record["kind"] for record in sample} == set(KIND_NAMES)


def test_it_covers_every_skip_reason(sample):
    picks = data_of(sample, "tool_choice.pick")
    assert {p["narrowedSkipped"] for p in picks if "narrowedSkipped" in p} == SKIP_REASONS
    narrowed = [p for p in picks if p["narrowed"]]
    assert narrowed
    # Narrowed picks serve the top of the ranking plus the always-served doors.
    assert all(set(p["served"]) - set(p["offered"]) for p in narrowed)
    assert {p["classifier"]["model"] for p in picks} == {
        "claude-haiku-4-5",
        "qwen3-8b",
        "gpt-5-mini",
    }


def test_it_gives_each_classifier_model_its_own_latency(sample):
    latencies = defaultdict(list)
    for pick in data_of(sample, "tool_choice.pick"):
        latencies[pick["classifier"]["model"]].append(pick["latencyMs"])
    medians = {m: sorted(v)[len(v) // 2] for m, v in latencies.items()}
    assert medians["qwen3-8b"] < medians["claude-haiku-4-5"] < medians["gpt-5-mini"]


def test_it_swaps_retries_and_stops(sample):
    selections = data_of(sample, "model_selection")
    swaps = Counter(
        (s["default_model"], s["selected_model"])
        for s in selections
        if s["selected_model"] != s["default_model"]
    )
    assert len(swaps) >= 3
    assert any(s.get("retry") for s in selections)
    assert {s["action"] for s in selections} == {"continue", "select", "stop"}


def test_it_walks_the_classifier_ladder(sample):
    records = [r for r in sample if r["kind"] == "classifier.verdict"]
    verdicts = [r["data"] for r in records]
    fallbacks = [
        (r["run_id"], r["data"]["toolCallId"])
        for r in records
        if r["data"]["rung"] == 1 and not r["data"]["reask"]
    ]
    assert fallbacks
    # Every ladder fallback follows a parse error of the seat on the same call.
    broken = {
        (r["run_id"], r["data"]["toolCallId"])
        for r in records
        if r["data"]["outcome"] == "parse_error" and r["data"]["rung"] == 0
    }
    assert set(fallbacks) <= broken
    assert {v["form"] for v in verdicts if v["outcome"] == "parse_error"} == {"missing", "conflict"}
    assert any(v["reask"] for v in verdicts)
    unavailable = [v for v in verdicts if v["outcome"] == "unavailable"]
    assert {v["cause"] for v in unavailable} == {"timeout", "error"}
    assert {v["disposition"] for v in unavailable} == {"asked", "denied"}
    assert {v["verdict"] for v in verdicts if v["outcome"] == "ruled"} == {"allow", "block"}


def test_it_breaks_contracts_on_some_seats_more_than_others(sample):
    attempts, breaks = Counter(), Counter()
    for v in data_of(sample, "classifier.verdict"):
        if v["rung"] == 0 and not v["reask"]:
            attempts[v["model"]] += 1
            breaks[v["model"]] += v["outcome"] == "parse_error"
    rate = {model: breaks[model] / attempts[model] for model in attempts}
    assert rate["qwen3-8b"] > 2 * rate["claude-haiku-4-5"]
    streaks = [
        n["detail"]["streak"]
        for n in data_of(sample, "notice")
        if n["code"] == "classifier.contract_broken"
    ]
    assert streaks and min(streaks) >= 2


def test_it_files_turns_of_every_protocol_and_decision(normalised):
    derived = [orjson.loads(r.derived_json) for r in normalised if r.kind == "turn"]
    assert {d["protocol"] for d in derived} == {"envelope", "hybrid", "implicit"}
    assert {d["decision"] for d in derived} == {
        "action",
        "subAgent",
        "chat",
        "taskComplete",
        "payloadChange",
        "other",
        "unparseable",
        "empty",
    }
    assert any(d["invented"] for d in derived)


def test_it_records_outcomes_that_agree_disagree_and_miss(sample):
    outcomes = data_of(sample, "tool_choice.outcome")
    assert {o["firstAgrees"] for o in outcomes if "firstAgrees" in o} == {True, False}
    assert any("miss" in o for o in outcomes)


def test_it_links_sub_agent_runs_to_their_parents(sample):
    runs = {record["run_id"]: record["agent"] for record in sample}
    children = {r["run_id"]: r["parent_run_id"] for r in sample if "parent_run_id" in r}
    assert children
    assert all(parent in runs for parent in children.values())
    # A sub-agent run is another agent working for its parent.
    assert all(runs[child] != runs[parent] for child, parent in children.items())


def test_it_files_every_notice_code_and_an_unknown_one(sample):
    codes = {n["code"] for n in data_of(sample, "notice")}
    assert set(NOTICE_DETAILS) <= codes
    assert codes - set(NOTICE_DETAILS)


def test_it_files_provider_errors_and_every_reliability_event(sample):
    errors = data_of(sample, "provider.error")
    refusals = [e for e in errors if e["error"] == "UnsupportedToolChoiceError"]
    assert refusals and all(e["toolChoice"]["type"] == "tool" for e in refusals)
    assert len({e["error"] for e in errors}) >= 4
    events = data_of(sample, "reliability")
    assert {e["type"] for e in events} == RELIABILITY_TYPES
    assert {e["errorKind"] for e in events if "errorKind" in e} == {
        "ok",
        "5xx-transient",
        "rate-limit",
        "circuit-open",
        "schema-fail",
        "unknown",
    }


def test_it_is_deterministic_for_a_seed():
    def first(seed: int) -> list[dict]:
        return list(generate_records(records=800, runs=20, seed=seed, end=END))

    assert first(7) == first(7)
    assert first(7) != first(8)


def test_it_gives_every_record_a_unique_id_stable_per_seed(sample):
    ids = [record["id"] for record in sample]
    assert len(set(ids)) == len(ids)
    assert all(i.startswith("demo-0-") for i in ids)


@pytest.mark.parametrize("span", [timedelta(days=1), timedelta(minutes=10), timedelta(seconds=1)])
def test_it_keeps_timestamps_inside_the_span(span):
    records = generate_records(records=2000, runs=40, seed=3, end=END, span=span)
    stamps = [datetime.fromisoformat(r["ts"]) for r in records]
    assert END - span <= min(stamps) and max(stamps) <= END


def test_it_never_dates_a_record_in_the_future():
    before = datetime.now(UTC)
    stamps = [datetime.fromisoformat(r["ts"]) for r in generate_records(records=500, runs=10)]
    assert max(stamps) <= before + timedelta(seconds=1)
    assert min(stamps) >= before - timedelta(days=1, seconds=1)


def test_it_streams_run_after_run():
    # A million records are not built up front: the first ones come at once, run by run.
    records = generate_records(records=1_000_000, runs=20_000, end=END)
    head = list(itertools.islice(records, 5000))
    run_ids = [r["run_id"] for r in head]
    blocks = [key for key, _ in itertools.groupby(run_ids)]
    assert len(blocks) == len(set(blocks)) > 10


@pytest.mark.parametrize(
    ("records", "runs", "message"),
    [
        (0, 1, "records must be at least 1"),
        (5, 0, "runs must be at least 1"),
        (5, 6, "cannot exceed records"),
    ],
)
def test_it_refuses_counts_it_cannot_honour(records, runs, message):
    with pytest.raises(ValueError, match=message):
        generate_records(records=records, runs=runs)


# --- the command ---------------------------------------------------------------------------


def seed(**options) -> str:
    out = StringIO()
    call_command("seed_demo", stdout=out, **options)
    return out.getvalue()


@pytest.mark.both_dbs
@pytest.mark.django_db
def test_it_seeds_records_and_runs():
    output = seed(records=1200, runs=25, batch=250)
    project = Project.objects.get(name="demo")
    assert Record.objects.filter(project=project).count() == 1200
    assert Run.objects.filter(project=project).count() == 25
    assert sum(Run.objects.filter(project=project).values_list("record_count", flat=True)) == 1200
    assert "seeded 1200 records (0 duplicates) in 25 runs for project demo in " in output
    assert "records/s" in output  # progress between batches
    assert set(Record.objects.values_list("kind", flat=True)) == set(KIND_NAMES)


@pytest.mark.both_dbs
@pytest.mark.django_db
def test_it_adds_nothing_the_second_time():
    seed(project="demo-twice", records=600, runs=12, seed=5)
    output = seed(project="demo-twice", records=600, runs=12, seed=5)
    assert "seeded 0 records (600 duplicates) in 12 runs for project demo-twice" in output
    assert Record.objects.filter(project__name="demo-twice").count() == 600
    assert sum(Run.objects.values_list("record_count", flat=True)) == 600


@pytest.mark.both_dbs
@pytest.mark.django_db
def test_it_links_sub_agent_runs_in_the_store(monkeypatch):
    # The generated runs depend on the time they end at: seed 0 with 3,000 records in 60 runs
    # delegates to no sub-agent when they end at 12:17-12:19 UTC (CI failed so on 2026-12-02).
    # Yesterday 10:00 UTC delegates (checked weekly over 400 days), and stays within retention.
    from django.utils import timezone

    yesterday = timezone.now() - timedelta(days=1)
    ended = yesterday.replace(hour=10, minute=0, second=0, microsecond=0)
    monkeypatch.setattr(timezone, "now", lambda: ended)
    seed(records=3000, runs=60)
    children = Run.objects.exclude(parent_run_id=None)
    assert children.exists()
    parents = set(Run.objects.values_list("run_id", flat=True))
    assert all(child.parent_run_id in parents for child in children)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"records": 0}, "--records must be at least 1"),
        ({"runs": 0}, "--runs must be at least 1"),
        ({"records": 5, "runs": 6}, r"--runs \(6\) cannot exceed --records \(5\)"),
        ({"days": 0}, "--days must be more than 0"),
        ({"project": "Not a slug"}, "not a valid project name"),
    ],
)
def test_it_refuses_bad_arguments(options, message):
    with pytest.raises(CommandError, match=message):
        seed(**options)
    assert not Record.objects.exists()

"""The spend metrics and run costs against an independent oracle (tests/support/cost_oracle.py):
each record priced with genai-prices' calc_price at its ts, a project's override from its date, a
turn's reported cost; unknown prices counted, never added as zero. Overrides made after the records
were stored price them again (records.catchup.reprice, through the workers' task)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from celery import current_app

from records import catchup
from records.models import PriceOverride, Record
from tests.support import cost_data, cost_oracle
from tests.support.cost_data import ingest_shuffled
from tests.support.cost_oracle import OracleOverride
from tests.support.factories import BASE_TS, record
from workers.tasks import enqueue_reprice, reprice_override_task

pytestmark = pytest.mark.both_dbs
RANGE = {"from": "2026-11-20T00:00:00Z", "to": "2026-11-21T00:00:00Z"}
NANO = 1e-9


def metric(persona, name, **params):
    response = persona.client(persona.read_key).get(f"/api/v1/metrics/{name}", {**RANGE, **params})
    assert response.status_code == 200, response.content
    return response.json()


def api_points(body, field):
    """{(bucket, group): [usd, count, unknown]} of the API's points."""
    out = {}
    for series in body["series"]:
        group = series["group"][field]
        for p in series["points"]:
            key = (cost_oracle.ts_of({"ts": p["t"]}), group or "")
            out[key] = [p["value"], p["count"], p["unknown"]]
    return out


def assert_matches(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for key, (value, count, unknown) in want.items():
        assert got[key][1:] == [count, unknown], key
        if unknown == count:  # nothing priced: no value, never zero
            assert got[key][0] is None, key
        else:  # each record rounds to a nano-USD
            assert got[key][0] == pytest.approx(value, rel=1e-9, abs=count * NANO), key


def check_everything(persona, records, overrides):
    for interval in ("minute", "hour"):
        for by in ("model", "agent", "provider", "kind"):
            body = metric(persona, "cost", interval=interval, group_by=by)
            want = cost_oracle.totals(records, overrides, by, interval)
            assert_matches(api_points(body, by), want)
    runs = cost_oracle.by_run(records, overrides)
    for run_id, (usd, unknown) in runs.items():
        response = persona.client(persona.read_key).get(f"/api/v1/runs/{run_id}")
        body = response.json()
        assert body["cost_unknown"] == unknown, run_id
        assert body["cost_usd"] == pytest.approx(usd, rel=1e-9, abs=200 * NANO), run_id


def model_override(project, model, provider, hours, prices) -> OracleOverride:
    row = PriceOverride.objects.create(
        project=project,
        model=model,
        provider=provider,
        effective_from=BASE_TS + timedelta(hours=hours),
        input_per_mtok=Decimal(prices[0]),
        output_per_mtok=Decimal(prices[1]),
        cache_read_per_mtok=Decimal(prices[2]),
        cache_write_per_mtok=Decimal(prices[3]),
    )
    return as_oracle(row)


def as_oracle(row: PriceOverride) -> OracleOverride:
    return OracleOverride(
        row.model,
        row.provider,
        row.effective_from,
        row.input_per_mtok,
        row.output_per_mtok,
        row.cache_read_per_mtok,
        row.cache_write_per_mtok,
    )


@pytest.fixture
def corpus(alice):
    records = cost_data.build()
    # In force before the records arrive: those from 10:30 on are priced by it on ingest.
    overrides = [model_override(alice.project, "gpt-4o-mini", "", 1.5, ("1", "2", "0.5", "1.5"))]
    ingest_shuffled(alice, records)
    return records, overrides


def test_the_spend_by_model_agent_provider_and_kind_is_the_oracles(alice, corpus):
    records, overrides = corpus
    check_everything(alice, records, overrides)


def test_unknown_prices_are_counted_apart_and_never_as_zero(alice, corpus):
    records, overrides = corpus
    body = metric(alice, "cost", interval="day", group_by="model")
    total = next(t for t in body["totals"] if t["group"]["model"] == cost_data.UNKNOWN_MODEL)
    calls = [r for r in records if r["data"].get("model") == cost_data.UNKNOWN_MODEL]
    assert total == {"group": {"model": cost_data.UNKNOWN_MODEL}, "value": None,
                     "count": len(calls), "unknown": len(calls)}  # fmt: skip
    everything = metric(alice, "cost", interval="day", group_by="agent")["totals"]
    assert sum(t["unknown"] for t in everything) == len(calls)


def test_cached_tokens_cost_the_cache_price(alice):
    call = record(
        "model_call",
        data={
            "provider": "anthropic",
            "model": "claude-sonnet-4-5",
            "usage": {"input": 0, "output": 0, "cacheRead": 100_000},
        },
    )
    fresh = record(
        "model_call",
        data={
            "provider": "anthropic",
            "model": "claude-sonnet-4-5",
            "usage": {"input": 100_000, "output": 0},
        },
        agent="billing-bot",
    )
    ingest_shuffled(alice, [call, fresh])
    body = metric(alice, "cost", interval="day", group_by="agent")
    spend = {t["group"]["agent"]: t["value"] for t in body["totals"]}
    # Claude Sonnet 4.5: 3 USD per million input tokens, 0.30 per million read from the cache.
    assert spend == {"support-bot": pytest.approx(0.03), "billing-bot": pytest.approx(0.3)}
    assert spend["support-bot"] == pytest.approx(cost_oracle.usd(call, []))


def test_cost_per_run_divides_by_the_runs_that_ended(alice, corpus):
    records, overrides = corpus
    by_agent = cost_oracle.totals(records, overrides, "agent")
    runs = {agent: len({r["run_id"] for r in records if r["agent"] == agent})
            for agent in cost_data.AGENTS}  # fmt: skip
    body = metric(alice, "cost_per_run", interval="day", group_by="agent")
    got = {t["group"]["agent"]: (t["value"], t["count"], t["unknown"]) for t in body["totals"]}
    want = {agent: (pytest.approx(usd / runs[agent], rel=1e-9), runs[agent], unknown)
            for agent, (usd, _, unknown) in by_agent.items()}  # fmt: skip
    assert got == want
    body = metric(alice, "cost_per_run", interval="day", group_by="model")
    got = {t["group"]["model"]: t["count"] for t in body["totals"]}
    assert set(got.values()) == {sum(runs.values())}  # every model's spend over every run


def test_an_override_made_after_the_records_prices_them_again_from_its_date(alice, corpus):
    records, overrides = corpus
    later = model_override(
        alice.project, "claude-sonnet-4-5", "anthropic", 2, ("10", "20", "1", "12")
    )
    # Not yet priced again: the metrics still answer the old prices.
    with pytest.raises(AssertionError):
        check_everything(alice, records, [*overrides, later])
    reprice_override_task.apply(
        args=(alice.project.pk, "claude-sonnet-4-5", "anthropic", later.effective_from.isoformat())
    )
    check_everything(alice, records, [*overrides, later])


def test_a_changed_and_a_deleted_override_reprice_on_commit(
    alice, corpus, django_capture_on_commit_callbacks
):
    records, overrides = corpus
    current_app.conf.task_always_eager = True  # the task runs in this process, as Celery runs it
    try:
        row = PriceOverride.objects.get(project=alice.project, model="gpt-4o-mini")
        with django_capture_on_commit_callbacks(execute=True) as sent:
            row.input_per_mtok = Decimal("3")
            row.save()
            enqueue_reprice(alice.project.pk, row.model, row.provider, row.effective_from)
        assert len(sent) == 1
        check_everything(alice, records, [as_oracle(row)])
        with django_capture_on_commit_callbacks(execute=True):
            row.delete()
            enqueue_reprice(alice.project.pk, row.model, row.provider, row.effective_from)
        check_everything(alice, records, [])
    finally:
        current_app.conf.task_always_eager = False


def test_records_the_catch_up_has_not_folded_yet_fold_their_new_price(alice):
    records = cost_data.build(120, seed=8)
    client = alice.client()
    response = client.post("/api/v1/records", {"records": records[:60]}, format="json")
    assert response.status_code == 200
    catchup.catch_up()
    response = client.post("/api/v1/records", {"records": records[60:]}, format="json")
    assert response.status_code == 200  # the first half folded, the second waiting
    assert Record.objects.filter(project=alice.project, id__gt=catchup.folded_upto()).count() == 60
    later = model_override(alice.project, "gpt-4o", "", 0, ("5", "5", "5", "5"))
    reprice_override_task.apply(args=(alice.project.pk, "gpt-4o", "", BASE_TS.isoformat()))
    catchup.catch_up()
    check_everything(alice, records, [later])

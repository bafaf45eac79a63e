"""Alert rules on any notice code (with `detail` matches) and on violations, against the oracle of
tests/support/decision_oracle.py: the engine's value at a tick, the preview's minute by minute, and
rules firing through the engine's tick on posted records. A detail field the notice rollups split by
(records.contract.rollup_keys.NOTICE_SPLITS) is read from the rollups; any other is counted by
alerts.notices over the rule's window. Both must agree with the oracle, which reads the posted dicts
only."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from alerts import engine, notices
from alerts.models import AlertEvent, AlertState, Rule
from alerts.preview import preview_rule
from alerts.windows import Query, fold, query_errors, window_grain, window_start
from records import catchup
from records.contract import rollup_keys
from records.contract.buckets import truncate
from records.contract.rollup_keys import NOTICE
from records.metrics.definitions import Row
from tests.support import decision_oracle as do
from tests.support.factories import BASE_TS, record
from tests.support.oracle import iso

T = BASE_TS
STEP = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1)}


# --- definitions (no database) ------------------------------------------------------------------
def errors(**match) -> dict:
    return query_errors(Query(metric="notices", match=tuple(sorted(match.items()))))


def test_a_notices_rule_matches_a_code_and_its_detail_fields():
    assert errors(code="route.fallback_to_primary") == {}
    assert errors(**{"code": "route.fallback_to_primary", "detail.cause": "timeout"}) == {}
    assert 'needs its "code"' in errors(**{"detail.cause": "timeout"})["match"][0]
    assert errors(**{"code": "x", "detail.a b": "1"})["match"]  # not a field name
    assert errors(verdict="block")["match"] == ['notices can match on: code and "detail.<field>"']
    # Only the notices metric reads a detail.
    assert query_errors(Query(metric="verdicts", match=(("detail.cause", "x"),)))["match"]


def test_it_reads_the_split_detail_fields_from_rollups_and_counts_the_others():
    split = Query("notices", match=(("code", "classifier.role_defaulted"), ("detail.reason", "x")))
    free = Query("notices", match=(("code", "route.fallback_to_primary"), ("detail.cause", "x")))
    assert not notices.is_scoped(split) and notices.is_scoped(free)
    assert not notices.is_scoped(Query("notices", match=(("code", "route.fallback_to_primary"),)))
    assert notices.unscoped(free).match == (("code", "route.fallback_to_primary"),)


def test_the_notices_metric_folds_rollup_rows_by_code_and_split_detail():
    def row(code, model, n, **split):
        key = rollup_keys.encode(NOTICE, {"code": code, **split})
        return Row(T, NOTICE, "bot", model, key, n, 0, 0, {})

    rows = [
        row("classifier.role_defaulted", "qwen3-8b", 3, reason="tier_table"),
        row("classifier.role_defaulted", "qwen3-8b", 2, reason="main_only"),
        row("classifier.role_defaulted", "gpt-5", 4, reason="tier_table"),
        row("route.fallback_to_primary", "qwen3-8b", 7),
    ]
    query = Query(
        "notices",
        match=(("code", "classifier.role_defaulted"), ("detail.reason", "tier_table")),
        group_by="model",
    )
    assert {g: acc.result() for g, acc in fold(query, rows).items()} == {
        "qwen3-8b": (3, 3),
        "gpt-5": (4, 4),
    }
    everything = Query("notices")
    assert {g: acc.result() for g, acc in fold(everything, rows).items()} == {"": (16, 16)}


# --- against the oracle -------------------------------------------------------------------------
@pytest.fixture
def world(alice):
    records = do.build(runs=30, seed=9)
    shuffled = records[:]
    random.Random(3).shuffle(shuffled)
    client = alice.client()
    for i in range(0, len(shuffled), 300):
        response = client.post("/api/v1/records", {"records": shuffled[i : i + 300]}, format="json")
        assert response.status_code == 200, response.content
    catchup.catch_up()
    return alice, records


RULES = [
    ({"code": "route.fallback_to_primary"}, ""),
    ({"code": "route.fallback_to_primary", "detail.cause": "timeout"}, ""),
    ({"code": "route.fallback_to_primary", "detail.cause": "error"}, "model"),
    ({"code": "route.fallback_to_primary", "detail.streak": "2"}, "agent"),  # a number, as text
    ({"code": "classifier.role_defaulted", "detail.reason": "tier_table"}, "model"),  # rollups
    ({"code": "route.classifier_unroutable"}, "agent"),
]


def _window(now, minutes):
    grain = window_grain(minutes)
    return window_start(now, minutes), truncate(now, grain) + STEP[str(grain)]


@pytest.mark.both_dbs
@pytest.mark.parametrize("minutes", [5, 60, 180])
def test_the_engine_counts_notices_as_the_oracle_does(world, minutes):
    alice, records = world
    rules = [
        Rule(
            project=alice.project,
            name=f"r{i}",
            metric="notices",
            match=match,
            group_by=by,
            threshold=1,
            window_minutes=minutes,
        )  # fmt: skip
        for i, (match, by) in enumerate(RULES)
    ]
    checked = 0
    # Fixed times, and just after some of the route notices (short windows hold few).
    route = sorted(do.when(r) for r in records if r["kind"] == "notice")
    times = [T + timedelta(minutes=m, seconds=20) for m in (37, 95, 151, 178)]
    for now in times + [t + timedelta(minutes=1) for t in route[::7]]:
        indexes, streaks = engine.read_rule_rows(alice.project.pk, rules, now)
        start, end = _window(now, minutes)
        for rule, (match, by) in zip(rules, RULES, strict=True):
            code = match["code"]
            detail = {k[len("detail.") :]: v for k, v in match.items() if k != "code"}
            want = do.notice_count(records, start, end, code, detail, by)
            got = engine.rule_samples(rule, indexes, streaks, now)
            assert {g: (s.value, s.count) for g, s in got.items()} == {
                g: (n, n) for g, n in want.items()
            }, (rule.match, minutes, now)
            checked += sum(want.values())
    assert checked > 20  # the windows hold notices of every rule


@pytest.mark.both_dbs
def test_the_preview_slides_a_detail_rule_as_the_oracle_counts(world):
    alice, records = world
    match = {"code": "route.fallback_to_primary", "detail.cause": "timeout"}
    rule = Rule(project=alice.project, name="p", metric="notices", match=match, threshold=2,
                comparator="gte", window_minutes=30)  # fmt: skip
    now = T + timedelta(hours=3, minutes=10)
    preview = preview_rule(rule, now=now, hours=4)
    (line,) = preview.lines
    seen = 0
    for t, value in zip(line.x, line.y, strict=True):
        start, end = _window(t, 30)
        want = do.notice_count(records, start, end, match["code"], {"cause": "timeout"})
        assert (value or 0) == want.get("", 0), t
        seen += bool(value)
    assert seen > 30 and preview.fired  # it would have fired


@pytest.mark.both_dbs
def test_a_detail_rule_fires_on_posted_notices_and_resolves(alice):
    rule = Rule.objects.create(
        project=alice.project, name="timeouts", metric="notices", comparator="gte",
        threshold=3, window_minutes=5, group_by="model",
        match={"code": "route.fallback_to_primary", "detail.cause": "timeout"},
    )  # fmt: skip

    def notice(i, cause, model="qwen3-8b"):
        detail = {"seat": "classifier", "from": model, "to": "gpt-5", "cause": cause}
        data = {"code": "route.fallback_to_primary", "message": "m", "detail": detail}
        return record("notice", ts=iso(T + timedelta(minutes=1, seconds=i)), data=data)

    posted = [notice(i, "timeout") for i in range(3)] + [notice(5, "error")]
    posted += [notice(6, "timeout", "claude-haiku-4-5")]
    response = alice.client().post("/api/v1/records", {"records": posted}, format="json")
    assert response.status_code == 200
    catchup.catch_up()
    engine.evaluate_all(now=T + timedelta(minutes=3))
    assert dict(AlertState.objects.filter(rule=rule).values_list("group", "state")) == {
        "qwen3-8b": "firing"
    }
    event = AlertEvent.objects.get(rule=rule)
    assert (event.value, event.to_state) == (3, "firing")
    engine.evaluate_all(now=T + timedelta(minutes=30))
    assert AlertEvent.objects.filter(rule=rule).latest("id").to_state == "ok"


# --- violations ---------------------------------------------------------------------------------
def _violations_corpus() -> list[dict]:
    rng = random.Random(8)
    out = []
    for i in range(120):
        moment = iso(T + timedelta(seconds=rng.uniform(0, 600)))
        data = {"offered": ["a", "b"], "ranked": [{"name": "a", "score": 0.5}],
                "served": ["a", "b"], "narrowed": False, "chosen": "a"}  # fmt: skip
        roll = rng.random()
        if roll < 0.2:
            data["chosen"] = "c"  # chosen_not_offered
        elif roll < 0.3:
            data["ranked"] = [{"name": "z", "score": 0.5}]  # ranked_not_offered
        out.append(record("tool_choice.pick", ts=moment, data=data, run_id=f"v-{i % 4}"))
        if rng.random() < 0.5:
            out.append(record("model_call", ts=moment, run_id=f"v-{i % 4}"))
    return out


@pytest.mark.both_dbs
@pytest.mark.parametrize("match", [{}, {"code": "chosen_not_offered"}])
def test_a_violation_rate_rule_fires_at_the_oracles_rate(alice, match):
    records = _violations_corpus()
    response = alice.client().post("/api/v1/records", {"records": records}, format="json")
    assert response.status_code == 200
    catchup.catch_up()
    rule = Rule.objects.create(project=alice.project, name="v", metric="violation_rate",
                               match=match, threshold=0.05, window_minutes=10)  # fmt: skip
    now = T + timedelta(minutes=9, seconds=30)
    engine.evaluate_all(now=now)
    start, end = _window(now, 10)
    if match:
        inside = [r for r in records if start <= do.when(r) < end]
        bad = sum(1 for r in inside if r["data"].get("chosen") == "c")
        want = bad / len(inside)
    else:
        want, _ = do.violation_rate(records, start, end)
    event = AlertEvent.objects.get(rule=rule)
    assert event.to_state == "firing" and event.value == pytest.approx(want)
    assert 0.05 < want < 0.4
    # The preview replays the same minutes: it would have fired, at the same value then.
    preview = preview_rule(rule, now=now, hours=1)
    (line,) = preview.lines
    assert line.y[-1] == pytest.approx(want) and preview.fired


# --- through the API and the metrics endpoint ---------------------------------------------------
@pytest.mark.both_dbs
def test_the_api_takes_a_detail_rule_and_names_a_detail_without_its_code(alice):
    from tests.support.alert_flow import all_key

    client = all_key(alice)
    rule = {"name": "timeouts", "metric": "notices", "comparator": "gt", "threshold": 3,
            "window_minutes": 10, "match": {"code": "route.fallback_to_primary",
                                            "detail.cause": "timeout"}}  # fmt: skip
    created = client.post("/api/v1/alert-rules", rule, format="json")
    assert created.status_code == 201, created.content
    assert Rule.objects.get(pk=created.json()["id"]).match["detail.cause"] == "timeout"
    bad = client.post(
        "/api/v1/alert-rules", {**rule, "match": {"detail.cause": "timeout"}}, format="json"
    )
    assert bad.status_code == 400 and "match" in bad.json()


@pytest.mark.both_dbs
def test_the_metrics_api_counts_notices_by_code_as_the_oracle_does(world):
    alice, records = world
    params = {"from": iso(T), "to": iso(T + timedelta(hours=4)), "interval": "hour"}
    response = alice.client(alice.read_key).get("/api/v1/metrics/notices", params)
    assert response.status_code == 200, response.content
    got: dict[str, int] = {}
    for total in response.json()["totals"]:
        got[total["group"]["code"]] = got.get(total["group"]["code"], 0) + total["value"]
    codes = {r["data"]["code"] for r in records if r["kind"] == "notice"}
    end = T + timedelta(hours=4)
    assert got == {c: sum(do.notice_count(records, T, end, c, {}).values()) for c in codes}

"""Every metric, per bucket, against an independent oracle (tests/support/oracle.py): as the
metrics API answers it, as the pages draw it and as the alert engine reads its windows.

The corpus arrives shuffled and in several passes, crosses minute and hour boundaries, and holds
the cases the seeds pin down: pick errors without a model, hybrid turns, refusals
and overloads, classifications split across buckets or arriving rung 1 first, every violation.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pytest

from alerts.windows import Query, fold, read_window, window_start
from dashboard.queries import page_rollups
from records import catchup
from records.contract.buckets import truncate
from records.models import Grain, Record
from tests.support import oracle
from tests.support.factories import BASE_TS

pytestmark = pytest.mark.both_dbs

START, END = BASE_TS, oracle.QUERY_END

# metric name, group_by, the API group's fields in the oracle's order
CASES = [
    ("classifier_latency_p50", None, ("model",)),
    ("classifier_latency_p95", None, ("model",)),
    ("classifier_latency_p99", None, ("model",)),
    ("pick_error_rate", None, ("model",)),
    ("narrowing_skip_rate", None, ("model",)),
    ("narrowing_skip_rate", "reason", ("reason",)),
    ("first_pick_agreement", None, ()),
    ("swap_rate", None, ("model",)),
    ("ladder_fallback_rate", None, ("model",)),
    ("verdicts", None, ("model", "verdict")),
    ("provider_errors", None, ("provider", "model", "error")),
    ("invented_tool_rate", None, ("decision", "protocol")),
    ("model_call_latency_p95", None, ("provider", "model")),
    ("records", None, ("kind",)),
    ("violation_rate", None, ("model",)),
    ("violation_rate", "code", ("code",)),
]


def _ingest_shuffled(persona, records):
    """Post in shuffled order, 200 a request, with a catch-up pass every few requests."""
    shuffled = records[:]
    random.Random(4).shuffle(shuffled)
    client = persona.client()
    for i, start in enumerate(range(0, len(shuffled), 200)):
        response = client.post(
            "/api/v1/records", {"records": shuffled[start : start + 200]}, format="json"
        )
        assert response.status_code == 200, response.content
        if i % 3 == 2:
            catchup.run_pass(300)
    catchup.catch_up()


@pytest.fixture
def world(alice):
    records = oracle.build()
    _ingest_shuffled(alice, records)
    # Arrival order decides which once-per-run notice repeats: the order the store kept.
    by_id = dict(Record.objects.filter(project=alice.project).values_list("record_key", "id"))
    arrival = sorted(records, key=lambda r: by_id[r["id"]])
    return alice, oracle.Oracle(arrival)


def _api_series(persona, name, interval, group_by, fields):
    params = {"from": oracle.iso(START), "to": oracle.iso(END), "interval": interval}
    if group_by:
        params["group_by"] = group_by
    response = persona.client(persona.read_key).get(f"/api/v1/metrics/{name}", params)
    assert response.status_code == 200, response.content
    out: dict[tuple, dict] = {}
    for series in response.json()["series"]:
        points = {
            datetime.fromisoformat(p["t"].replace("Z", "+00:00")): (p["value"], p["count"])
            for p in series["points"]
            if p["count"]  # a bucket of rows behind no record (e.g. outcomes without firstAgrees)
        }
        if points:
            out[oracle.group_tuple(series["group"], fields)] = points
    return out


def _same(got: dict, want: dict, quantile: bool) -> list:
    """The differences between two {group: {bucket: (value, count)}} (or {group: (v, c)})."""
    problems = []
    for group in sorted(set(got) | set(want), key=repr):
        a, b = got.get(group), want.get(group)
        if a is None or b is None:
            problems.append((group, a, b))
            continue
        if isinstance(b, tuple):
            a, b = {None: a}, {None: b}
        for t in sorted(set(a) | set(b), key=repr):
            x, y = a.get(t), b.get(t)
            if x is None or y is None or x[1] != y[1] or not oracle.approx(x[0], y[0], quantile):
                problems.append((group, t, x, y))
    return problems


@pytest.mark.parametrize("interval", ["minute", "hour"])
def test_the_metrics_api_answers_what_the_oracle_computes(world, interval):
    persona, exact = world
    problems = {}
    for name, group_by, fields in CASES:
        got = _api_series(persona, name, interval, group_by, fields)
        want = exact.series(name, interval, group_by)
        diff = _same(got, want, quantile="latency" in name)
        if diff:
            problems[(name, group_by)] = diff[:3]
    assert not problems, problems


def test_the_corpus_holds_the_cases_it_is_meant_to(world):
    _, exact = world
    codes = {code for found in exact.violations.values() for code in found}
    assert codes == set(oracle.VIOLATION_CODES)
    picks = exact.by_kind["tool_choice.pick_error"]
    assert any("model" not in r["data"]["classifier"] for r in picks)
    # Classifications whose attempts fall in two minute buckets, and ones that fell back.
    split = [
        f
        for f, fell in oracle.classifications(exact.records)
        if fell and oracle.when(f).second == 59
    ]
    assert split
    refusals = [r["data"] for r in exact.by_kind["provider.error"]]
    assert any(oracle.is_refusal(d) for d in refusals)
    assert any("toolChoice" in d and not oracle.is_refusal(d) for d in refusals)
    hybrid = [r["data"] for r in exact.by_kind["turn"] if r["data"]["protocol"] == "hybrid"]
    assert any(oracle.decision(d) == "taskComplete" for d in hybrid)


def test_the_ladder_fallback_rate_is_never_above_one_in_any_bucket(world):
    persona, _ = world
    for series in _api_series(persona, "ladder_fallback_rate", "minute", None, ("model",)).values():
        assert all(0 <= value <= 1 for value, _ in series.values())


def _page_series(series: list[dict], fields) -> dict:
    return {
        oracle.group_tuple(s["group"], fields): {
            p["t"]: (p["value"], p["count"]) for p in s["points"] if p["count"]
        }
        for s in series
    }


def test_the_pages_draw_what_the_oracle_computes(world):
    persona, exact = world
    project = persona.project.pk
    now = END - timedelta(minutes=1)  # the 6-hour period (hour buckets) covers the corpus
    page = page_rollups.classifiers_page(project, now, "6h", [])
    checks = [
        (page["pick_errors"]["series"], "pick_error_rate", None, ("model",)),
        (page["ladder"]["series"], "ladder_fallback_rate", None, ("model",)),
        (page["skip_series"], "narrowing_skip_rate", "reason", ("reason",)),
    ]
    models = page_rollups.models_page(project, now, "6h", [])
    checks.append((models["swap_series"], "swap_rate", None, ("model",)))
    for series, name, group_by, fields in checks:
        want = exact.series(name, "hour", group_by)
        assert not _same(_page_series(series, fields), want, quantile=False), name
    agreement = {(): {t: (v, c) for t, v, c in page["agreement"] if c}}
    assert not _same(agreement, exact.series("first_pick_agreement", "hour"), quantile=False)
    latency = {
        (row["model"] or None,): (row["p95"], row["count"]) for row in page["latency_totals"]
    }
    assert not _same(latency, exact.totals("classifier_latency_p95"), quantile=True)
    verdicts = {
        (t["group"]["model"], t["group"]["verdict"]): (t["value"], t["count"])
        for t in page["verdicts"]
    }
    assert not _same(verdicts, exact.totals("verdicts"), quantile=False)
    refused = {}
    for r in exact.by_kind["provider.error"]:
        if oracle.is_refusal(r["data"]):
            key = (r["data"]["provider"], r["data"]["model"])
            refused[key] = refused.get(key, 0) + 1
    assert models["refused"] == refused

    overview = page_rollups.overview(project, now, "6h", [])
    kpis = {k.name: (k.value, k.count) for k in overview["kpis"]}
    for name in ("pick_error_rate", "narrowing_skip_rate", "swap_rate", "ladder_fallback_rate",
                 "first_pick_agreement"):  # fmt: skip
        value, count = _overall(exact, name)
        assert kpis[name][1] == count and oracle.approx(kpis[name][0], value, False), name
    assert kpis["records"][0] == len(exact.records)


def _overall(exact: oracle.Oracle, name: str) -> tuple[float | None, int]:
    totals = exact.totals(name).values()
    den = sum(c for _, c in totals)
    num = sum(v * c for v, c in totals if v is not None)
    return (num / den if den else None), den


@pytest.mark.parametrize(
    ("minutes", "now"),
    [
        (60, BASE_TS + timedelta(hours=2, minutes=30, seconds=5)),  # minute buckets
        (180, END - timedelta(seconds=1)),  # hour buckets
    ],
)
def test_the_alert_engine_reads_what_the_oracle_computes(world, minutes, now):
    persona, exact = world
    grain = Grain.MINUTE if minutes <= 60 else Grain.HOUR
    since = window_start(now, minutes)
    step = timedelta(minutes=1) if grain == Grain.MINUTE else timedelta(hours=1)
    until = truncate(now, grain) + step
    problems = {}
    for name in ("pick_error_rate", "narrowing_skip_rate", "swap_rate", "ladder_fallback_rate",
                 "classifier_latency_p95", "violation_rate"):  # fmt: skip
        query = Query(metric=name, group_by="model")
        rows = read_window(persona.project.pk, [query], since, truncate(now, grain), grain)
        got = {(group or None,): acc.result() for group, acc in fold(query, rows).items()}
        got = {g: v for g, v in got.items() if v[1]}
        want = exact.totals(name, since=since, until=until)
        diff = _same(got, want, quantile="latency" in name)
        if diff:
            problems[name] = diff[:3]
    assert not problems, problems

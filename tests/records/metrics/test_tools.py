"""The tools pages, selection accuracy and the narrowing what-if against an independent oracle
(tests/support/tool_oracle.py), arrival order, rebuild, query counts and hostile tool names.

The corpus arrives shuffled and in several passes (an outcome often before its pick, a re-filed
earlier pick after the later one), crosses minute and hour boundaries, and names tools with
markup and quotes.
"""

from __future__ import annotations

import math
import random
from datetime import timedelta

import pytest
from django.apps import apps
from django.db import connection
from django.test.utils import CaptureQueriesContext

from alerts.windows import Query, fold, read_window
from dashboard.queries import tool_queries
from records import catchup
from records.catchup import tool_funnel
from records.catchup.rebuild import reset_rollups
from records.contract.rollup_keys import TOOL_KINDS
from records.metrics import tool_stats
from records.models import Grain, Rollup, ToolDecision, ToolMiss
from tests.support import tool_oracle as oracle
from tests.support.factories import BASE_TS, record
from tests.support.oracle import approx, iso, lower_rank
from tests.support.pages import operator
from tests.support.plans import plan_nodes, uses_index

pytestmark = pytest.mark.both_dbs

START, END = BASE_TS, oracle.QUERY_END
PERIOD = f"{START.isoformat()}/{END.isoformat()}"  # a custom range: hour buckets
QUERY = {"period": "custom", "from": iso(START), "to": iso(END)}


def _post(persona, records, passes_every=None, batch=200):
    client = persona.client()
    for i, start in enumerate(range(0, len(records), batch)):
        response = client.post(
            "/api/v1/records", {"records": records[start : start + batch]}, format="json"
        )
        assert response.status_code == 200, response.content
        if passes_every and i % passes_every == passes_every - 1:
            catchup.run_pass(150)
    catchup.catch_up()


@pytest.fixture
def corpus():
    return oracle.build()


@pytest.fixture
def world(alice, corpus):
    shuffled = corpus[:]
    random.Random(3).shuffle(shuffled)
    _post(alice, shuffled, passes_every=2)
    return alice, corpus


def _close(a, b, tolerance=1e-9) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=tolerance, abs_tol=tolerance)


# --- the funnel -----------------------------------------------------------------------------------
STAGES = ("offered", "ranked", "served", "narrowed_out", "door", "chosen", "called",
          "called_served", "called_narrowed_out", "called_not_offered", "missed",
          "chosen_called", "calls", "invented_calls", "error_calls")  # fmt: skip


def test_the_tools_page_counts_what_the_oracle_counts(world):
    persona, records = world
    want = oracle.funnel(records, START, END)
    page = tool_queries.tools_page(persona.project.pk, END, PERIOD, [])
    rows = tool_queries.tool_rows(persona.project.pk, "hour", START, END, [],
                                   keep=("kind", "key"))  # fmt: skip
    got = tool_stats.tool_stats(rows)
    assert set(got) == set(want)
    for name, stages in want.items():
        s = got[name]
        for stage in STAGES:
            assert getattr(s, stage) == stages.get(stage, 0), (name, stage)
        if stages.get("ranked"):
            assert _close(s.mean_rank, stages["rank_sum"] / stages["ranked"])
            assert _close(s.mean_score, stages["score_sum"] / stages["ranked"], 1e-6)
        reasons = {k[5:]: v for k, v in stages.items() if k.startswith("skip:")}
        assert s.skipped == reasons, name
        durations = oracle.turn_durations(records, START, END, name)
        assert s.sketch.count == len(durations)
        if durations:  # a sketch: within 1 % of the exact quantile
            assert approx(s.p95, lower_rank(durations, 0.95), quantile=True), name
    # The page lists offered tools, the misses, the invented names most called first.
    listed = {t.name for t in page["tools"]}
    assert listed >= {n for n, st in want.items() if st.get("offered")}
    assert [t.name for t in page["missed"]] == sorted(
        (n for n, st in want.items() if st.get("missed")), key=lambda n: (-want[n]["missed"], n)
    )
    invented = sorted(((n, st["invented_calls"]) for n, st in want.items()
                       if st.get("invented_calls")), key=lambda i: (-i[1], i[0]))  # fmt: skip
    assert page["invented"] == invented
    picks = sum(1 for r in records if r["kind"] in ("tool_choice.pick", "tool_choice.pick_error"))
    assert page["picks"] == picks


def test_a_tool_page_shows_its_funnel_models_and_the_runs_that_missed_it(world):
    persona, records = world
    want = oracle.funnel(records, START, END)
    name = oracle.EVIL
    page = tool_queries.tool_page(persona.project.pk, END, PERIOD, [], name)
    for stage in STAGES:
        assert getattr(page["stats"], stage) == want[name].get(stage, 0), stage
    for model in oracle.CLASSIFIERS:
        mine = [r for r in records if r["kind"] != "tool_choice.pick"
                or r["data"]["classifier"]["model"] == model]  # fmt: skip
        expected = oracle.funnel(mine, START, END).get(name, {})
        assert page["models"][model].offered == expected.get("offered", 0)
        assert page["models"][model].missed == expected.get("missed", 0)
    # Over time: the buckets add up to the totals.
    assert sum(s.offered for _, s in page["series"]) == want[name]["offered"]
    missed = oracle.missed_runs(records, name)
    assert missed, "the corpus misses the tool somewhere"
    listed = {run.run_id: run.misses for run in page["missed_runs"]["runs"]}
    assert listed == missed
    assert dict(ToolMiss.objects.filter(tool=name).values_list("run_id", "misses")) == missed


def test_the_missed_runs_come_a_page_at_a_time(world, monkeypatch):
    persona, records = world
    name = oracle.EVIL
    missed = oracle.missed_runs(records, name)
    monkeypatch.setattr(tool_queries, "MISSED_RUNS", 2)
    seen, before = [], None
    while True:
        page = tool_queries.missed_runs(persona.project.pk, name, START, END, [], before)
        assert len(page["runs"]) <= 2
        seen += [run.run_id for run in page["runs"]]
        before = page["next"]
        if before is None:
            break
    assert sorted(seen) == sorted(missed) and len(seen) == len(set(seen))


# --- selection accuracy ---------------------------------------------------------------------------
def test_selection_accuracy_matches_the_oracle_by_model_and_agent_over_time(world):
    persona, records = world
    page = tool_queries.selection_page(persona.project.pk, END, PERIOD, [])
    for by in ("model", "agent"):
        want = oracle.selection(records, by, "hour")
        for metric, field in (("agreement", "agree"), ("chosen", "chosen")):
            got = {
                (group, t): (value, count)
                for group, points in page[f"{metric}_by_{by}"].items()
                for t, value, count in points
                if count
            }
            expected = {
                key: (cell[field][0] / cell[field][1], cell[field][1])
                for key, cell in want.items()
                if cell[field][1]
            }
            assert got.keys() == expected.keys(), (by, metric)
            for key, (value, count) in expected.items():
                assert got[key][1] == count and _close(got[key][0], value), (by, metric, key)


def test_calibration_bins_and_error_match_the_oracle(world):
    persona, records = world
    page = tool_queries.selection_page(persona.project.pk, END, PERIOD, [])
    want = oracle.calibration(records)
    assert set(page["calibration"]) == set(want)
    for model, (bins, ece, n) in want.items():
        cal = page["calibration"][model]
        got = cal.reliability()
        assert [(b, k) for b, k, _, _ in got] == [(b, k) for b, k, _, _ in bins]
        for (_, _, agree, conf), (_, _, want_agree, want_conf) in zip(got, bins, strict=True):
            assert _close(agree, want_agree) and _close(conf, want_conf, 1e-6)
        value, count = cal.result()
        assert count == n and _close(value, ece, 1e-6)
    # Confidences outside [0, 1] are in the corpus, clipped into the end bins.
    assert any(b in (0, 9) for bins, _, _ in want.values() for b, *_ in bins)


def test_the_metrics_api_and_the_alert_engine_read_the_same_calibration(world):
    persona, records = world
    want = oracle.calibration(records)
    params = {"from": iso(START), "to": iso(END), "interval": "hour"}
    response = persona.client(persona.read_key).get("/api/v1/metrics/calibration_error", params)
    assert response.status_code == 200, response.content
    totals = {t["group"]["model"]: (t["value"], t["count"]) for t in response.json()["totals"]}
    assert totals.keys() == want.keys()
    for model, (_, ece, n) in want.items():
        assert totals[model][1] == n and _close(totals[model][0], ece, 1e-6)
    query = Query(metric="calibration_error", group_by="model")
    rows = read_window(persona.project.pk, [query], START, END, Grain.HOUR)
    folded = {group: acc.result() for group, acc in fold(query, rows).items()}
    for model, (_, ece, n) in want.items():
        assert folded[model][1] == n and _close(folded[model][0], ece, 1e-6)
    agreement = persona.client(persona.read_key).get(
        "/api/v1/metrics/selection_agreement", {**params, "group_by": "agent"}
    )
    assert agreement.status_code == 200
    expected = oracle.selection(records, "agent", "hour")
    for t in agreement.json()["totals"]:
        cells = [c["agree"] for (agent, _), c in expected.items() if agent == t["group"]["agent"]]
        num, den = sum(c[0] for c in cells), sum(c[1] for c in cells)
        assert t["count"] == den and _close(t["value"], num / den)


# --- the narrowing what-if ------------------------------------------------------------------------
def test_the_narrowing_what_if_matches_the_oracle_overall_by_model_and_by_agent(world):
    persona, records = world
    page = tool_queries.narrowing_page(persona.project.pk, END, PERIOD, [])

    def same(got, want):
        assert [n for n, _, _ in got.points] == [n for n, _, _ in want]
        for (_, miss, cost), (_, want_miss, want_cost) in zip(got.points, want, strict=True):
            assert _close(miss, want_miss) and _close(cost, want_cost)

    same(page["overall"], oracle.whatif(records)["all"])
    by_model = oracle.whatif(records, lambda pick: pick["data"]["classifier"]["model"])
    assert page["by_model"].keys() == by_model.keys()
    for model, want in by_model.items():
        same(page["by_model"][model], want)
    by_agent = oracle.whatif(records, lambda pick: pick["agent"])
    for agent, want in by_agent.items():
        same(page["by_agent"][agent], want)


def test_need_is_the_smallest_top_n_that_serves_every_offered_call():
    offered = ["a", "b", "c", "d"]
    assert tool_funnel.need(offered, ["c", "a", "b"], ["a"]) == 2
    assert tool_funnel.need(offered, ["c", "a", "b"], ["a", "b"]) == 3
    assert tool_funnel.need(offered, ["c", "a", "b"], ["d"]) == 4  # unranked: the full set
    assert tool_funnel.need(offered, ["c", "a"], ["zzz"]) == 0  # never offered: no N misses it
    assert tool_funnel.need(offered, ["x", "c", "c", "a"], ["a"]) == 2  # unoffered, repeated names
    assert tool_funnel.confidence_bin(1.0) == (9, 1_000_000)
    assert tool_funnel.confidence_bin(-3) == (0, 0)
    assert tool_funnel.confidence_bin(0.35) == (3, 350_000)


# --- arrival order and rebuild --------------------------------------------------------------------
def _snapshot(project):
    rows = sorted(
        Rollup.objects.filter(project=project, kind__in=TOOL_KINDS).values_list(
            "grain", "bucket", "kind", "agent", "model", "key", "count", "tokens_in", "tokens_out"
        )
    )
    scores = {
        r[:6]: round(r[6], 6)
        for r in Rollup.objects.filter(project=project, kind__in=TOOL_KINDS).values_list(
            "grain", "bucket", "kind", "agent", "model", "key", "latency_sum"
        )
    }
    decisions = sorted(
        ToolDecision.objects.filter(project=project).values_list(
            "run_id", "iteration", "pick", "outcome"
        )
    )
    misses = sorted(
        ToolMiss.objects.filter(project=project).values_list("tool", "run_id", "misses")
    )
    return rows, scores, decisions, misses


def test_shuffled_arrival_gives_the_same_tool_rollups_as_ordered(alice, bob, corpus):
    ordered = sorted(corpus, key=lambda r: r["ts"])
    _post(alice, ordered)
    shuffled = corpus[:]
    random.Random(9).shuffle(shuffled)
    # Several passes, so that outcomes come before their picks and a re-filed earlier pick
    # replaces the one already joined.
    _post(bob, shuffled, passes_every=1, batch=60)
    mine, theirs = _snapshot(alice.project), _snapshot(bob.project)
    assert mine[0] and mine[2] and mine[3]
    assert theirs == mine
    # Nothing left at zero: every stored count is a decision's (or a record's).
    assert not Rollup.objects.filter(kind__in=TOOL_KINDS, count=0).exists()
    assert not ToolMiss.objects.filter(misses=0).exists()


def test_an_outcome_before_its_pick_and_an_earlier_pick_after_both_land_once(alice, bob):
    pick = record("tool_choice.pick", ts="2026-11-20T09:00:30Z",
                  data={"offered": ["a", "b", "c"], "ranked": [{"name": "a", "score": 0.9}],
                        "served": ["a"], "chosen": "a", "confidence": 0.9})  # fmt: skip
    earlier = record("tool_choice.pick", ts="2026-11-20T08:59:59Z",
                     data={"offered": ["a", "b", "c"], "ranked": [{"name": "b", "score": 0.4}],
                           "served": ["b"], "chosen": "b", "confidence": 0.4})  # fmt: skip
    outcome = record("tool_choice.outcome", ts="2026-11-20T09:01:00Z",
                     data={"called": ["a"], "firstAgrees": True})  # fmt: skip
    for r in (pick, earlier, outcome):
        _post(alice, [r])  # a pass after each: pick, then the earlier pick, then the outcome
    for r in (outcome, pick, earlier):
        _post(bob, [r])  # outcome first, then the later pick, then the earlier one
    assert _snapshot(bob.project) == _snapshot(alice.project)
    # The earlier pick is the decision's: b was served, a (called) was narrowed out.
    hours = Rollup.objects.filter(project=bob.project, kind__in=TOOL_KINDS, grain=Grain.HOUR)
    assert {r.bucket.hour for r in hours.filter(kind="derived.tool_link")} == {8}
    assert ToolMiss.objects.get(project=bob.project).tool == "a"


def test_rebuild_rollups_rebuilds_the_tool_state(world):
    persona, _ = world
    before = _snapshot(persona.project)
    models = {model.__name__: model for model in apps.get_app_config("records").get_models()}
    reset_rollups(models)
    assert not ToolDecision.objects.exists() and not ToolMiss.objects.exists()
    catchup.catch_up()
    assert _snapshot(persona.project) == before


# --- the pages ------------------------------------------------------------------------------------
PAGES = ("/tools/", "/selection/", "/narrowing/")


@pytest.mark.parametrize(
    ("url", "most"),
    [
        ("/tools/", 6),  # session, user, projects, tool counts, turn-call sketches, pick skips
        # session, user, projects, tool counts, sketches, missed runs, the release markers
        ("/tools/grep/", 7),
        ("/selection/", 6),  # session, user, projects, by model, by agent, the release markers
        # session, user, projects, the NARROWING rows, the sampled model calls, the prices
        ("/narrowing/", 6),
    ],
)
def test_the_tools_pages_cost_the_same_queries_however_much_data(
    alice, django_assert_max_num_queries, url, most
):
    client = operator("alice", alice)
    _post(alice, oracle.build(runs=3, seed=1))
    with django_assert_max_num_queries(most):
        assert client.get(url, QUERY).status_code == 200
    _post(alice, oracle.build(runs=40, seed=2))
    with django_assert_max_num_queries(most):
        assert client.get(url, QUERY).status_code == 200


def test_hostile_tool_names_are_escaped_on_every_tools_page(world):
    persona, _ = world
    client = operator("alice", persona)
    evil_invented = oracle.INVENTED[1]
    for url in (*PAGES, "/tools/" + oracle.EVIL + "/", "/tools/" + oracle.QUOTED + "/"):
        response = client.get(url, QUERY)
        assert response.status_code == 200, url
        html = response.content.decode()
        assert oracle.EVIL not in html and evil_invented not in html, url
        assert "<script>alert" not in html
    listing = client.get("/tools/", QUERY).content.decode()
    assert "&lt;script&gt;alert(&quot;tool&quot;)&lt;/script&gt;" in listing
    assert "&lt;img src=x onerror=alert(3)&gt;" in listing  # in the invented names
    assert "it&#x27;s &quot;quoted&quot; | 100%" in listing
    # The links to a tool's page carry its name percent-encoded, and lead to it.
    quoted = client.get("/tools/" + oracle.QUOTED + "/", QUERY).content.decode()
    assert 'class="tool-name">it&#x27;s &quot;quoted&quot; | 100%</span>' in quoted


def test_the_tools_pages_need_a_login_and_show_only_the_operators_project(world, bob):
    persona, _ = world
    from django.test import Client

    for url in (*PAGES, "/tools/grep/"):
        assert Client().get(url).status_code == 302
    outsider = operator("bob", bob)
    listing = outsider.get("/tools/", QUERY).content.decode()
    assert "search_docs" not in listing


def test_the_nav_links_to_the_tools_pages(world):
    persona, _ = world
    html = operator("alice", persona).get("/").content.decode()
    for url in PAGES:
        assert f'href="{url}"' in html


# --- a tool's page is a tool's of the project ---------------------------------------------------
EARLY = {"period": "custom", "from": iso(BASE_TS), "to": iso(BASE_TS + timedelta(hours=1))}
LATER = {
    "period": "custom",
    "from": iso(BASE_TS + timedelta(days=2)),
    "to": iso(BASE_TS + timedelta(days=2, hours=1)),
}
NOTHING_IN_PERIOD = "No record offered, ranked, served or called this tool in this period"


@pytest.fixture
def known_tools(alice, bob):
    pick = {"offered": ["search_docs", "only_offered"], "ranked": [{"name": "search_docs",
            "score": 0.9}], "chosen": "search_docs", "served": ["search_docs"]}  # fmt: skip
    turn = {"toolCalls": [{"name": "turn_only"}], "toolNameMap": {}}
    _post(alice, [
        record("tool_choice.pick", data=pick, run_id="r1"),
        record("tool_choice.outcome", data={"called": ["search_docs"]}, run_id="r1"),
        record("turn", data=turn, run_id="r1"),
    ])  # fmt: skip
    _post(bob, [record("tool_choice.pick", data={**pick, "offered": ["globex_tool"],
                                                  "ranked": [], "chosen": None,
                                                  "served": ["globex_tool"]})])  # fmt: skip
    return operator("alice", alice)


def test_it_404s_a_tool_no_record_of_the_project_ever_named(known_tools):
    client = known_tools
    for query in (EARLY, LATER, {}):
        # A prefix of a known name, or one whose "_" a LIKE would take for any character.
        for name in ("never-heard-of", "search", "search_doc_", "search%", "globex_tool"):
            assert client.get(f"/tools/{name}/", query).status_code == 404, (name, query)


def test_a_tool_known_only_from_an_earlier_period_is_an_empty_page(known_tools):
    client = known_tools
    for name in ("search_docs", "only_offered", "turn_only"):
        response = client.get(f"/tools/{name}/", LATER)
        assert response.status_code == 200, name
        assert NOTHING_IN_PERIOD in response.content.decode(), name


def test_a_tool_only_ever_offered_or_only_called_by_a_turn_has_its_page(known_tools):
    client = known_tools
    offered = client.get("/tools/only_offered/", EARLY)
    assert offered.status_code == 200
    html = offered.content.decode()
    assert '<dd data-stat="offered">1</dd>' in html and NOTHING_IN_PERIOD not in html
    assert client.get("/tools/turn_only/", EARLY).status_code == 200


def test_whether_a_tool_is_known_is_one_index_probe(known_tools, alice):
    assert tool_queries.tool_known(alice.project.pk, "search_docs")
    assert not tool_queries.tool_known(alice.project.pk, "search_doc_")
    if connection.vendor != "postgresql":
        return  # the plan below is PostgreSQL's
    with CaptureQueriesContext(connection) as probe:
        tool_queries.tool_known(alice.project.pk, "never-heard-of")
    (query,) = probe.captured_queries
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a few rows: it would scan them
        nodes = plan_nodes(cursor, query["sql"])
    assert uses_index(nodes, "rollup_tool_key"), nodes


def test_the_tool_key_index_covers_the_tool_kinds_rows():
    """The partial index that finds a tool by name spells out the tool kinds: it must name the
    kinds the catch-up writes."""
    from records.contract import rollup_keys
    from records.models import Rollup

    (index,) = [i for i in Rollup._meta.indexes if i.name == "rollup_tool_key"]
    assert dict(index.condition.children)["kind__in"] == [rollup_keys.TOOL, rollup_keys.TOOL_CALL]

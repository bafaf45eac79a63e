"""The fallbacks, sessions and run-comparison pages against the oracle of
tests/support/decision_oracle.py, their query counts, and their escaping of hostile names.

Records go in through the ingest API, shuffled, and the workers' catch-up pass, so the pages read
real rollups and run summaries.
"""

from __future__ import annotations

import json
import random
import re
from datetime import timedelta
from html import unescape
from html.parser import HTMLParser
from urllib.parse import quote, unquote

import pytest

from dashboard.views import compare, fallbacks
from records import catchup
from tests.support import decision_oracle as do
from tests.support.factories import BASE_TS, record
from tests.support.oracle import iso
from tests.support.pages import operator, post

pytestmark = pytest.mark.both_dbs

START = BASE_TS
END = BASE_TS + timedelta(hours=4)
RANGE = {"period": "custom", "from": "2026-11-20T09:00", "to": "2026-11-20T13:00"}


@pytest.fixture
def world(alice):
    records = do.build()
    shuffled = records[:]
    random.Random(2).shuffle(shuffled)
    for i in range(0, len(shuffled), 150):
        post(alice, shuffled[i : i + 150])
        if i % 300 == 0:
            catchup.run_pass(200)
    catchup.catch_up()
    return operator("alice", alice), records


class Rows(HTMLParser):
    """The attributes of every <tr> with class `cls`."""

    def __init__(self, cls: str):
        super().__init__()
        self.cls, self.rows = cls, []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "tr" and self.cls in (attrs.get("class") or "").split():
            self.rows.append(attrs)


def rows(html: str, cls: str) -> list[dict]:
    parser = Rows(cls)
    parser.feed(html)
    return parser.rows


def figure(html: str, dom_id: str) -> dict:
    match = re.search(rf'<script id="{dom_id}-figure" type="application/json">(.*?)</script>',
                      html, re.S)  # fmt: skip
    assert match, dom_id
    return json.loads(match.group(1))


# --- fallbacks ----------------------------------------------------------------------------------
def test_it_counts_every_cause_as_the_oracle_does(world):
    client, records = world
    response = client.get("/fallbacks/", RANGE)
    assert response.status_code == 200
    html = response.content.decode()
    want = do.fallback_counts(records, "hour", START, END)
    for cause in do.CAUSES:
        got = re.search(rf'<tr data-cause="{cause}"><td>[^<]*</td><td class="num">([\d,]+)</td>',
                        html)  # fmt: skip
        assert got, cause
        assert int(got.group(1).replace(",", "")) == sum(want[cause].values()), cause
    # Over time: one stacked bar trace per cause that happened, bucket by bucket.
    drawn = figure(html, "chart-fallbacks-over-time")["data"]
    by_label = {unescape(t["name"]): dict(zip(t["x"], t["y"], strict=True)) for t in drawn}
    for cause, by_hour in want.items():
        if not by_hour:
            assert unescape(fallbacks.CAUSES[cause]) not in by_label
            continue
        got = by_label[fallbacks.CAUSES[cause]]
        assert got == {t.strftime("%Y-%m-%d %H:%M:%S.000"): n for t, n in by_hour.items()}
    assert sum(sum(v.values()) for v in want.values()) > 40  # the corpus has every cause
    assert all(want[c] for c in do.CAUSES)


def test_it_counts_the_runs_that_moved_as_the_oracle_does(world):
    client, records = world
    html = client.get("/fallbacks/", RANGE).content.decode()
    active, moved = do.moved_runs(records, START, END)
    assert f'<td class="num" data-runs>{active} / {moved}</td>' in html
    listed = re.findall(r'<a class="chain" href="/fallbacks/runs/([^"]+)/">', html)
    runs = do.runs(records)
    want = sorted((r for r in runs if runs[r]["swap"] or runs[r]["fallback"]),
                  key=lambda r: runs[r]["last"], reverse=True)  # fmt: skip
    got = [unquote(unescape(r)) for r in listed]
    # Newest last record first; runs that end at the same instant come in either order.
    assert sorted(got) == sorted(want[: fallbacks.RUNS_SHOWN])
    assert [runs[r]["last"] for r in got] == [runs[r]["last"] for r in want[: fallbacks.RUNS_SHOWN]]


def test_a_runs_chain_says_what_was_configured_what_served_and_why(world):
    client, records = world
    runs = do.runs(records)
    for run_id in [r for r in runs if runs[r]["swap"] or runs[r]["fallback"]][:6]:
        html = client.get(f"/fallbacks/runs/{quote(run_id)}/").content.decode()
        got = {}
        for cause in re.findall(r'<tr data-cause="([a-z_]+)">', html):
            got[cause] = got.get(cause, 0) + 1
        assert got == dict(do.chain(records, run_id)), run_id
    # A route notice's detail: configured `from` (and seat), served `to`, why its cause.
    notice = next(r for r in records if r["kind"] == "notice"
                  and r["data"]["code"] == "route.fallback_to_primary")  # fmt: skip
    html = client.get(f"/fallbacks/runs/{quote(notice['run_id'])}/").content.decode()
    d = notice["data"]["detail"]
    assert f"<td>{d['from']} (seat classifier)</td><td>{d['to']}</td><td>{d['cause']}, " in html


def test_the_fallback_pages_escape_notice_text_and_hostile_names(world):
    client, records = world
    page = client.get("/fallbacks/", RANGE).content.decode()
    chain = client.get(f"/fallbacks/runs/{quote(do.EVIL_RUN)}/").content.decode()
    for html in (page, chain):
        assert "<b>evil</b>" not in html and "&lt;b&gt;evil&lt;/b&gt;" in html
        assert "<img src=x" not in html
    if any(r["run_id"] == do.EVIL_RUN and r["kind"] == "notice"
           and r["data"]["code"] == "route.fallback_to_primary" for r in records):  # fmt: skip
        assert "&lt;img src=x onerror=alert(&quot;notice&quot;)&gt;" in chain


def test_the_period_form_gets_the_charts_alone(world):
    client, _ = world
    html = client.get("/fallbacks/", RANGE, HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in html
    assert '<div id="fallbacks-charts">' in html


def test_the_fallback_pages_take_a_fixed_number_of_queries(world, django_assert_max_num_queries):
    client, _ = world
    with django_assert_max_num_queries(9):
        assert client.get("/fallbacks/", RANGE).status_code == 200
    with django_assert_max_num_queries(9):
        assert client.get("/fallbacks/runs/run-1/").status_code == 200


def test_a_chain_walks_a_classification_once_and_says_why_the_seat_gave_none():
    t = BASE_TS

    def verdict(seconds, **data):
        base = {"toolName": "send_email", "toolCallId": "c1", "model": "qwen3-8b",
                "seatModel": "qwen3-8b", "rung": 0, "reask": False, "outcome": "ruled",
                "verdict": "allow", "seat": "think", "station": "leg", "wallMs": 10.0}  # fmt: skip
        return {"id": seconds, "kind": "classifier.verdict", "ts": t + timedelta(seconds=seconds),
                "iteration": None, "data": {**base, **data}, "derived": {}}  # fmt: skip

    steps = fallbacks.chain([
        verdict(0, outcome="parse_error", verdict=None, form="missing"),
        verdict(1, rung=1, model="gpt-5"),
        verdict(2, rung=1, model="gpt-5", reask=True),
        verdict(3, rung=1, model="gpt-5"),  # the same classification: not another walk
    ])  # fmt: skip
    assert [(s.cause, s.configured, s.served, s.why) for s in steps] == [
        ("ladder", "qwen3-8b", "gpt-5", "send_email: seat parse_error (missing)")
    ]


def _moved_by(cause: str, run_id: str, t) -> list[dict]:
    """The records of a run that moved by `cause` alone (one event of it)."""
    env = {"run_id": run_id, "ts": iso(t)}
    verdict = {"toolName": "send_email", "toolCallId": f"{run_id}-call", "model": "qwen3-8b",
               "seatModel": "qwen3-8b", "rung": 0, "reask": False, "outcome": "ruled",
               "verdict": "allow", "seat": "think", "station": "leg", "wallMs": 10.0}  # fmt: skip

    def notice(code, detail):
        return record("notice", data={"code": code, "level": "warn", "message": "m",
                                      "detail": detail}, **env)  # fmt: skip

    if cause == "route_fallback":
        return [notice("route.fallback_to_primary",
                       {"seat": "classifier", "from": "qwen3-8b", "to": "gpt-5",
                        "cause": "timeout"})]  # fmt: skip
    if cause == "route_unroutable":
        return [notice("route.classifier_unroutable", {})]
    if cause == "classifier_fallback":
        return [notice("classifier.fallback",
                       {"from": "qwen3-8b", "to": "gpt-5", "cause": "parse_error"})]  # fmt: skip
    if cause == "ladder":
        seat = {**verdict, "outcome": "parse_error", "form": "missing"}
        del seat["verdict"]
        later = {**env, "ts": iso(t + timedelta(seconds=1))}
        return [record("classifier.verdict", data=seat, **env),
                record("classifier.verdict", data={**verdict, "rung": 1, "model": "gpt-5"},
                       **later)]  # fmt: skip
    if cause == "reliability":
        return [record("reliability", data={"type": "fallback_triggered", "primary": "anthropic",
                                            "fallback": "openai"}, **env)]  # fmt: skip
    assert cause == "router"
    return [record("model_selection", data={"default_model": "gpt-5",
                                            "selected_model": "gpt-5-mini"}, **env)]  # fmt: skip


def test_the_runs_listed_as_moved_are_the_runs_behind_each_counted_cause(alice):
    t = BASE_TS + timedelta(minutes=30)
    behind = {cause: [f"{cause}-{k}" for k in range(i + 1)]
              for i, cause in enumerate(fallbacks.CAUSES)}  # fmt: skip
    records = [r for cause, runs in behind.items() for run in runs
               for r in _moved_by(cause, run, t)]  # fmt: skip
    # Runs that did not move: a kept model, a retry, a seat that ruled, another notice.
    still = [
        record("model_selection", run_id="still-0", ts=iso(t)),
        record("reliability", data={"type": "retried", "attempt": 1}, run_id="still-1", ts=iso(t)),
        record("classifier.verdict", run_id="still-2", ts=iso(t)),
        record("notice", run_id="still-3", ts=iso(t)),
    ]
    post(alice, records + still)
    catchup.catch_up()
    html = operator("alice", alice).get("/fallbacks/", RANGE).content.decode()
    listed = {unquote(unescape(r)) for r in
              re.findall(r'<a class="chain" href="/fallbacks/runs/([^"]+)/">', html)}  # fmt: skip
    moved = sum(len(runs) for runs in behind.values())
    assert f'<td class="num" data-runs>{moved + len(still)} / {moved}</td>' in html
    for cause, runs in behind.items():
        counted = re.search(rf'<tr data-cause="{cause}"><td>[^<]*</td><td class="num">(\d+)</td>',
                            html)  # fmt: skip
        assert counted and int(counted.group(1)) == len(runs), cause  # the charts' count
        assert listed & set(runs) == set(runs), cause  # the list
    assert listed == {run for runs in behind.values() for run in runs}


@pytest.fixture
def migrated_back(transactional_db):
    from tests.support.migrations import latest, migrate

    yield migrate
    migrate(latest())


def test_unroutable_notices_stored_before_flag_their_runs_as_moved(alice, migrated_back):
    from records.models import Record, Run

    t = BASE_TS + timedelta(minutes=30)
    post(alice, [*_moved_by("route_unroutable", "unroutable", t),
                 *_moved_by("route_fallback", "route", t),
                 record("model_selection", run_id="still", ts=iso(t))])  # fmt: skip
    catchup.catch_up()
    migrated_back([("records", "0027_rollup_tool_key")])
    # As ingest and the catch-up left them when this notice was no fallback. Only the columns
    # of that schema are named, here and below: the later ones do not exist yet.
    Record.objects.filter(run_id="unroutable").update(is_fallback=False)
    Run.objects.filter(run_id="unroutable").update(has_fallback=False)
    migrated_back([("records", "0028_unroutable_notice_is_a_fallback")])
    assert Record.objects.only("is_fallback").get(run_id="unroutable").is_fallback
    flagged = dict(Run.objects.values_list("run_id", "has_fallback"))
    assert flagged == {"unroutable": True, "route": True, "still": False}


# --- sessions -----------------------------------------------------------------------------------
def test_sessions_list_what_the_oracle_adds_up(world):
    client, records = world
    want = do.sessions(records)
    html = client.get("/sessions/").content.decode()
    got = rows(html, "session-row")
    assert [unescape(r["data-session"]) for r in got] == do.session_order(records)
    for r in got:
        s = want[unescape(r["data-session"])]
        assert int(r["data-runs"]) == s["runs"]
        assert int(r["data-records"]) == s["records"]
        assert r["data-tokens"] == f"{s['tokens'][0]}/{s['tokens'][1]}"
        flags = dict(f.split(":") for f in r["data-flags"].split())
        assert {k: int(v) for k, v in flags.items()} == {k: v for k, v in s["flags"].items() if v}
        picks, calls = (int(n) for n in r["data-counts"].split(",")[:2])
        assert (picks, calls) == (s["picks"], s["calls"])


@pytest.mark.parametrize("walk", [None, 4])
def test_sessions_page_with_keyset_links_and_never_repeat_or_skip_one(world, monkeypatch, walk):
    client, records = world
    from dashboard.views import sessions

    monkeypatch.setattr(sessions, "PAGE_SIZE", 2)
    monkeypatch.setattr(sessions, "BATCH", 3)  # sessions with many runs span batches
    monkeypatch.setattr(sessions, "FIRST_SLICE", timedelta(minutes=20))  # and slices
    if walk:  # a page that stops at the most runs it may walk goes on from there
        monkeypatch.setattr(sessions, "MAX_WALK", walk)
    seen, query = [], ""
    for _ in range(60):
        html = client.get("/sessions/?" + query).content.decode()
        seen += [unescape(r["data-session"]) for r in rows(html, "session-row")]
        nxt = re.search(r'<a class="next" href="\?([^"]+)"', html)
        if not nxt:
            break
        query = unescape(nxt.group(1))
    assert seen == do.session_order(records)


def test_a_session_page_lists_its_runs_with_their_tokens(world):
    client, records = world
    runs = do.runs(records)
    session = do.EVIL_SESSION
    html = client.get(f"/sessions/{quote(session, safe='')}/").content.decode()
    mine = sorted((r for r in runs if runs[r]["session"] == session),
                  key=lambda r: runs[r]["last"], reverse=True)  # fmt: skip
    listed = [
        unescape(t) for t in re.findall(r'<td class="run-id"><a href="[^"]+" title="([^"]+)"', html)
    ]
    assert listed == mine
    s = do.sessions(records)[session]
    assert f"<dd data-tokens>{s['tokens'][0]} / {s['tokens'][1]}</dd>" in html
    assert "<script>alert" not in html and "&lt;script&gt;alert(&quot;session&quot;)" in html


def test_the_session_pages_take_a_fixed_number_of_queries(world, django_assert_max_num_queries):
    client, _ = world
    # The walk jumps over gaps (one MAX) and reads a slice of runs at a time, each twice as
    # wide as a sparse one before it: a handful of slices for this corpus's three hours.
    with django_assert_max_num_queries(12):
        assert client.get("/sessions/").status_code == 200
    with django_assert_max_num_queries(8):
        assert client.get("/sessions/sess-1/").status_code == 200


def test_a_damaged_sessions_link_says_so(world):
    client, _ = world
    html = client.get("/sessions/?after=%%%").content.decode()
    assert "this page link is damaged" in html


def test_a_damaged_fallbacks_link_says_so(alice):
    html = operator("alice", alice).get("/fallbacks/", {"after": "%%%"}).content.decode()
    assert "this page link is damaged; start again from the first page" in html


# --- run comparison -----------------------------------------------------------------------------
def _two_runs(alice) -> None:
    t = BASE_TS

    def at(s):
        return iso(t + timedelta(seconds=s))

    offered = ["search_docs", "grep", do.EVIL_NOTICE]
    for run_id, served, selected in (("run-a", ["search_docs", "grep"], "gpt-5"),
                                     ("run-b", ["search_docs"], "claude-sonnet-4-5")):  # fmt: skip
        post(alice, [
            record("model_selection", run_id=run_id, ts=at(0),
                   data={"step": 0, "default_model": "gpt-5", "selected_model": "gpt-5"}),
            record("tool_choice.pick", run_id=run_id, ts=at(1), data={
                "iteration": 0, "offered": offered, "chosen": "search_docs", "narrowed": False,
                "ranked": [{"name": "search_docs", "score": 0.9}, {"name": "grep", "score": 0.1}],
                "served": offered}),
            record("turn", run_id=run_id, ts=at(2),
                   data={"text": "<script>alert(1)</script>", "toolCalls": []}),
            record("model_selection", run_id=run_id, ts=at(10),
                   data={"step": 1, "default_model": "gpt-5", "selected_model": selected}),
            record("tool_choice.pick", run_id=run_id, ts=at(11), data={
                "iteration": 1, "offered": ["search_docs", "grep"], "chosen": "search_docs",
                "narrowed": True, "served": served,
                "ranked": [{"name": "search_docs", "score": 0.9}, {"name": "grep", "score": 0.1}]}),
        ])  # fmt: skip
    catchup.catch_up()


def test_it_lines_two_runs_up_by_iteration_and_marks_what_differs(alice):
    _two_runs(alice)
    client = operator("alice", alice)
    html = client.get("/compare/", {"a": "run-a", "b": "run-b"}).content.decode()
    steps = re.findall(r'<tbody class="compare-step( differs)?" data-iteration="(\d+)">', html)
    assert steps == [("", "0"), (" differs", "1")]
    differing = re.findall(r'<tr class="lane diff" data-lane="([a-z]+)">', html)
    assert differing == ["served", "model"]
    # The turn (no iteration of its own) joined iteration 0, escaped like every record text.
    assert html.count("<script>alert(1)</script>") == 0
    assert "&lt;img src=x onerror=alert(&quot;notice&quot;)&gt;" in html


def test_two_ticked_runs_of_the_list_compare_without_javascript(alice):
    _two_runs(alice)
    client = operator("alice", alice)
    runs = client.get("/runs/").content.decode()
    assert 'form="compare-form"' in runs and 'action="/compare/"' in runs

    def table(html: str) -> str:
        return re.search(r'<table class="compare">.*?</table>', html, re.S).group(0)

    ticked = client.get("/compare/?run=run-a&run=run-b").content.decode()
    typed = client.get("/compare/", {"a": "run-a", "b": "run-b"}).content.decode()
    assert table(ticked) == table(typed) and 'data-lane="served"' in table(ticked)
    three = client.get("/compare/?run=run-a&run=run-b&run=run-c")
    assert three.status_code == 400 and "Select exactly two runs" in three.content.decode()
    assert client.get("/compare/", {"a": "run-a", "b": "nope"}).status_code == 404


def test_links_to_the_comparison_under_runs_reach_it_unless_they_name_a_run(alice):
    _two_runs(alice)
    client = operator("alice", alice)
    for query in ("?a=run-a&b=run-b", "?run=run-a&run=run-b", ""):
        response = client.get("/runs/compare/" + query)
        assert response.status_code == 302 and response["Location"] == "/compare/" + query
    # A run named "compare" has the bare path; a link with a comparison's arguments compares.
    post(alice, [record("model_selection", run_id="compare")])
    catchup.catch_up()
    run = client.get("/runs/compare/")
    assert '<h1>Run <span class="mono">compare</span></h1>' in run.content.decode()
    assert client.get("/runs/compare/?page=1").status_code == 200
    response = client.get("/runs/compare/?a=run-a&b=compare")
    assert response.status_code == 302 and response["Location"] == "/compare/?a=run-a&b=compare"
    assert "Compare runs" in client.get(response["Location"]).content.decode()


def test_a_comparison_takes_a_fixed_number_of_queries(alice, django_assert_max_num_queries):
    _two_runs(alice)
    client = operator("alice", alice)
    with django_assert_max_num_queries(10):
        assert client.get("/compare/", {"a": "run-a", "b": "run-b"}).status_code == 200


def test_lanes_put_records_without_an_iteration_in_the_one_under_way():
    def rec(kind, iteration, data, derived=None):
        return {"kind": kind, "iteration": iteration, "data": data, "derived": derived or {}}

    got = compare.lanes([
        rec("turn", None, {}, {"decision": "chat"}),
        rec("tool_choice.outcome", 2, {"called": ["grep"]}),
        rec("classifier.verdict", None, {"toolName": "x", "outcome": "ruled", "verdict": "block",
                                         "model": "m", "rung": 0}),
    ])  # fmt: skip
    assert {k: dict(v) for k, v in got.items()} == {
        None: {"turns": ["chat"]},
        2: {"called": ["grep"], "verdicts": ["x: block on m (rung 0)"]},
    }

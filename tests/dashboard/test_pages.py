"""The operator pages (docs/architecture.md, "Pages") through Django's test client.

alice is a member of `acme`, bob of `globex`; carol is in both. Records go in through the
ingest API and the workers' catch-up pass, as in production, so the pages read real rollups
and run summaries. What a browser does with the pages (charts drawn, htmx, no console errors)
is in tests/browser/.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from html import escape, unescape
from html.parser import HTMLParser
from urllib.parse import unquote, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from dashboard.charts import category_charts
from dashboard.http.csp import HEADER
from dashboard.queries import page_rollups, timeline
from records import catchup
from records.demo.generator import generate_records
from records.models import Membership, Run
from tests.support.factories import record
from tests.support.pages import EVIL_TEXT, figure, operator, post
from tests.support.release_data import ladders
from workers import heartbeat

EVIL_TOOL = "<img src=x onerror=alert(2)>"
PAGES = ("/", "/runs/", "/models/", "/classifiers/", "/streaks/")


# --- fixtures -------------------------------------------------------------------------------------
# A row of the runs list: its run id.
RUN_LINK = r'<tr class="run-row">\s*<td class="run-id"><a href="/runs/([^/]+)/"'


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def demo(persona, records: int = 400, runs: int = 6, seed: int = 1) -> None:
    """Realistic records of every kind over the past two hours, rolled up."""
    end = timezone.now().replace(microsecond=0) - timedelta(minutes=1)
    post(
        persona,
        list(
            generate_records(
                records=records, runs=runs, seed=seed, end=end, span=timedelta(hours=2)
            )
        ),
    )
    catchup.catch_up()


def evil_run(persona, run_id: str = "evil-run") -> None:
    """A run whose record text is markup: a turn's text, a ranked tool name, a notice."""
    t = timezone.now().replace(microsecond=0) - timedelta(minutes=30)

    def at(seconds: int) -> str:
        return iso(t + timedelta(seconds=seconds))

    tools = ["search_docs", EVIL_TOOL, "grep"]
    post(
        persona,
        [
            record("model_selection", run_id=run_id, ts=at(0)),
            record(
                "tool_choice.pick",
                run_id=run_id,
                ts=at(1),
                data={
                    "offered": tools,
                    "ranked": [{"name": EVIL_TOOL, "score": 0.7}, {"name": "grep", "score": 0.2}],
                    "chosen": EVIL_TOOL,
                    "served": [EVIL_TOOL, "grep", "read_skill"],
                },
            ),
            record("turn", run_id=run_id, ts=at(2), data={"text": EVIL_TEXT}),
            record(
                "notice",
                run_id=run_id,
                ts=at(3),
                data={"code": "engine.note", "message": EVIL_TEXT, "detail": {}},
            ),
        ],
    )
    catchup.catch_up()


class Scripts(HTMLParser):
    """Every <script> element's attributes and whether it has a body."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict] = []
        self.handlers: list[str] = []
        self._open: dict | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.handlers += [name for name in attrs if name.startswith("on")]
        if tag == "script":
            self._open = {**attrs, "body": ""}
            self.scripts.append(self._open)

    def handle_data(self, data):
        if self._open is not None:
            self._open["body"] += data

    def handle_endtag(self, tag):
        if tag == "script":
            self._open = None


def scripts_of(page: str) -> Scripts:
    parser = Scripts()
    parser.feed(page)
    return parser


def first_run(persona) -> Run:
    return (
        Run.objects.filter(project=persona.project, kind_counts__has_key="tool_choice.pick")
        .order_by("id")
        .first()
    )


# --- login and projects ---------------------------------------------------------------------------
@pytest.mark.parametrize("url", [*PAGES, "/runs/r/", "/runs/r/picks/0/"])
def test_it_sends_a_visitor_to_the_login_page(db, url):
    response = Client().get(url)
    assert response.status_code == 302
    assert response["Location"].startswith(f"/accounts/login/?next={url}")


def test_it_logs_an_operator_in_and_lands_on_their_projects_overview(alice, bob):
    user = get_user_model().objects.create_user("alice", password="a long pass phrase")
    Membership.objects.create(user=user, project=alice.project, role="admin")
    client = Client()
    response = client.post(
        "/accounts/login/", {"username": "alice", "password": "a long pass phrase"}, follow=True
    )
    page = response.content.decode()
    assert response.status_code == 200 and "<h1>Overview" in page
    assert '<option value="acme" selected>acme</option>' in page
    assert "globex" not in page


@pytest.mark.parametrize("url", PAGES)
def test_it_shows_every_page_to_a_member(alice, alice_page, url):
    demo(alice)
    response = alice_page.get(url)
    assert response.status_code == 200
    assert "acme" in response.content.decode()


def test_it_hides_another_projects_run_and_pick(alice, bob, alice_page):
    demo(bob, seed=2)
    run = first_run(bob)
    assert alice_page.get(f"/runs/{run.run_id}/").status_code == 404
    assert alice_page.get(f"/runs/{run.run_id}/picks/0/").status_code == 404
    assert alice_page.get("/runs/", {"project": "globex"}).status_code == 404
    assert alice_page.get("/", {"project": "globex"}).status_code == 404


def test_it_404s_a_pick_at_an_iteration_without_one(alice, alice_page):
    demo(alice)
    run = first_run(alice)
    assert alice_page.get(f"/runs/{run.run_id}/picks/9999/").status_code == 404
    assert alice_page.get("/runs/no-such-run/").status_code == 404


def test_it_switches_project_and_keeps_the_page(alice, bob):
    carol = operator("carol", alice, bob)
    demo(alice, seed=1)
    demo(bob, seed=2)
    assert '<h1>Runs <span class="muted">acme' in carol.get("/runs/").content.decode()
    response = carol.post("/projects/switch/", {"project": "globex", "next": "/runs/?agent=x"})
    assert response.status_code == 302 and response["Location"] == "/runs/"
    page = carol.get("/runs/").content.decode()
    assert '<h1>Runs <span class="muted">globex' in page
    assert '<option value="globex" selected>globex</option>' in page
    bobs = set(Run.objects.filter(project=bob.project).values_list("run_id", flat=True))
    shown = set(re.findall(RUN_LINK, page))
    assert shown and shown <= bobs


def test_it_leaves_a_run_page_for_the_runs_list_when_switching(alice, bob):
    carol = operator("carol", alice, bob)
    response = carol.post("/projects/switch/", {"project": "globex", "next": "/runs/abc/"})
    assert response["Location"] == "/runs/"


def test_it_refuses_to_switch_to_a_project_the_operator_is_not_in(alice, bob, alice_page):
    response = alice_page.post("/projects/switch/", {"project": "globex", "next": "/"})
    assert response.status_code == 404
    assert "acme" in alice_page.get("/").content.decode()


def test_it_opens_a_shared_run_link_of_the_operators_other_project(alice, bob):
    carol = operator("carol", alice, bob)
    demo(bob, seed=2)
    run = first_run(bob)
    page = carol.get(f"/runs/{run.run_id}/").content.decode()
    assert run.run_id in page and '<option value="globex" selected>' in page


def test_it_tells_an_operator_without_projects_so(db):
    client = operator("dave")
    page = client.get("/").content.decode()
    assert "You are not a member of any project yet" in page
    assert client.get("/runs/").status_code == 404


# --- the runs list --------------------------------------------------------------------------------
def test_it_filters_runs_and_keeps_the_filters_in_the_url(alice, alice_page):
    demo(alice, records=600, runs=12)
    swapped = Run.objects.filter(project=alice.project, has_swap=True)
    agent = swapped.values_list("agent", flat=True).first()
    want = set(swapped.filter(agent=agent).values_list("run_id", flat=True))
    assert want and want != set(Run.objects.values_list("run_id", flat=True))
    page = alice_page.get("/runs/", {"agent": agent, "has": "swap"}).content.decode()
    shown = set(re.findall(RUN_LINK, page))
    assert shown == want
    # The form shows the filters, and the export button carries them with the project.
    assert f'name="agent" value="{agent}"' in page
    assert 'value="swap" checked' in page
    assert f'href="/exports/?project=acme&amp;agent={agent}&amp;has=swap"' in page


def test_it_takes_has_as_checkboxes_or_one_comma_list(alice, alice_page):
    demo(alice, records=600, runs=12)
    a = alice_page.get("/runs/?has=swap&has=contract_break").content.decode()
    b = alice_page.get("/runs/?has=swap,contract_break").content.decode()
    rows = re.compile(RUN_LINK)
    assert rows.findall(a) == rows.findall(b) != []


def test_it_names_the_bad_filter(alice, alice_page):
    page = alice_page.get("/runs/", {"from": "yesterday"}).content.decode()
    assert "from: &#x27;yesterday&#x27; is not an RFC 3339 timestamp" in page


def test_it_pages_runs_with_a_keyset_cursor(alice, alice_page):
    t = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    post(
        alice, [record(run_id=f"run-{i:03d}", ts=iso(t + timedelta(seconds=i))) for i in range(120)]
    )
    catchup.catch_up()
    seen, url, pages = [], "/runs/", 0
    while url:
        page = alice_page.get(url).content.decode()
        seen += re.findall(RUN_LINK, page)
        nxt = re.search(r'<a class="next" href="(\?[^"]+)"', page)
        url = "/runs/" + nxt.group(1).replace("&amp;", "&") if nxt else None
        pages += 1
    assert pages == 3
    assert seen == [f"run-{i:03d}" for i in reversed(range(120))]  # newest first, once each


def test_it_sorts_runs_by_record_count_both_ways(alice, alice_page):
    t = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    sizes = {"small": 1, "large": 5, "medium": 3}
    post(
        alice,
        [
            record(run_id=name, ts=iso(t + timedelta(seconds=i)))
            for name, n in sizes.items()
            for i in range(n)
        ],
    )
    catchup.catch_up()
    rows = re.compile(RUN_LINK)
    assert rows.findall(alice_page.get("/runs/?sort=-record_count").content.decode()) == [
        "large",
        "medium",
        "small",
    ]
    assert rows.findall(alice_page.get("/runs/?sort=record_count").content.decode()) == [
        "small",
        "medium",
        "large",
    ]


def test_it_rejects_a_damaged_page_link(alice, alice_page):
    page = alice_page.get("/runs/", {"after": "not-a-cursor"}).content.decode()
    assert "this page link is damaged" in page


def test_it_answers_htmx_with_the_results_alone(alice, alice_page):
    demo(alice)
    response = alice_page.get("/runs/", {"has": "error"}, HTTP_HX_REQUEST="true")
    page = response.content.decode()
    assert response.status_code == 200 and "<html" not in page and 'class="runs"' in page


# --- one run and one pick -------------------------------------------------------------------------
def test_it_shows_a_run_iteration_by_iteration(alice, alice_page):
    demo(alice)
    run = first_run(alice)
    page = alice_page.get(f"/runs/{run.run_id}/").content.decode()
    assert f'<h1>Run <span class="mono">{run.run_id}</span></h1>' in page
    assert "Iteration 0</h3>" in page and "Iteration 1</h3>" in page
    assert page.count('<tr class="record ') == run.record_count
    assert f'href="/runs/{run.run_id}/picks/0/"' in page
    lanes = {trace["name"] for trace in figure(page, "chart-run-latencies")["data"]}
    assert {"tool_choice.pick", "model_call"} <= lanes


def test_it_lists_sub_runs_and_links_the_parent(alice, alice_page):
    t = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    post(
        alice,
        [
            record(run_id="parent", ts=iso(t)),
            record(run_id="child", parent_run_id="parent", ts=iso(t + timedelta(seconds=1))),
        ],
    )
    catchup.catch_up()
    parent = alice_page.get("/runs/parent/").content.decode()
    assert "Sub-agent runs" in parent and 'href="/runs/child/"' in parent
    child = alice_page.get("/runs/child/").content.decode()
    assert 'Parent run</dt><dd><a href="/runs/parent/">parent</a>' in child


def test_it_opens_a_run_whose_id_has_slashes_and_spaces(alice, alice_page):
    t = timezone.now().replace(microsecond=0) - timedelta(minutes=20)
    run_id = "team a/run 7?x#1"
    post(alice, [record("tool_choice.pick", run_id=run_id, ts=iso(t))])
    catchup.catch_up()
    runs = alice_page.get("/runs/").content.decode()
    link = re.search(r'<tr class="run-row">\s*<td class="run-id"><a href="([^"]+)"', runs).group(1)
    assert link == "/runs/team%20a/run%207%3Fx%231/"
    assert run_id in alice_page.get(link).content.decode()
    assert alice_page.get(link + "picks/0/").status_code == 200


# Run ids are the agents' to choose: a word a page path uses, unicode, URL-reserved characters,
# a pick page's path, segments a browser resolves, the mark of an encoded id.
ODD_RUN_IDS = ("compare", "ran-ünïcødé-日本", "a/b", "x?y#z", "100%", "a b", "a/picks/1",
               "./x/..", "..", "~tilde")  # fmt: skip


@pytest.mark.parametrize("run_id", ODD_RUN_IDS)
def test_it_opens_any_run_from_the_runs_lists_own_link(alice, alice_page, run_id):
    t = timezone.now().replace(microsecond=0) - timedelta(minutes=20)
    post(alice, [record("tool_choice.pick", run_id=run_id, ts=iso(t)),
                 record("tool_choice.pick", run_id="other", ts=iso(t))])  # fmt: skip
    catchup.catch_up()
    runs = alice_page.get("/runs/").content.decode()
    links = dict(
        (unescape(title), unescape(href))
        for href, title in re.findall(r'<td class="run-id"><a href="([^"]+)" title="([^"]*)"', runs)
    )
    assert set(links) == {run_id, "other"}
    # A browser sends a path with its "." and ".." segments resolved (%2E too).
    segments = unquote(urlsplit(links[run_id]).path).split("/")
    assert not {".", ".."} & set(segments), links[run_id]
    response = alice_page.get(links[run_id])
    assert response.status_code == 200, links[run_id]
    html = response.content.decode()
    assert f'<h1>Run <span class="mono">{escape(run_id)}</span></h1>' in html
    # Its pages link to each other with the same encoding.
    pick = re.search(r'<div class="title"><a href="([^"]+)">', html).group(1)
    assert unescape(pick) == links[run_id] + "picks/0/"
    assert escape(run_id) in alice_page.get(unescape(pick)).content.decode()
    assert alice_page.get(reverse("dash-fallback-run", args=[run_id])).status_code == 200


def test_it_404s_a_run_path_that_encodes_no_run_or_another_runs_path(alice, alice_page):
    post(alice, [record(run_id="a", ts=iso(timezone.now() - timedelta(minutes=5)))])
    catchup.catch_up()
    assert alice_page.get("/runs/a/").status_code == 200
    # "~YQ" encodes "a", whose path is /runs/a/; the others encode nothing.
    for path in ("/runs/~YQ/", "/runs/~/", "/runs/~!!/", "/runs/~%FF%FE/"):
        assert alice_page.get(path).status_code == 404, path


def test_it_polls_a_live_run_and_not_a_finished_one(alice, alice_page):
    now = timezone.now().replace(microsecond=0)
    post(
        alice,
        [
            record(run_id="live", ts=iso(now - timedelta(minutes=2))),
            record(run_id="done", ts=iso(now - timedelta(minutes=3))),
            record(
                run_id="done",
                ts=iso(now - timedelta(minutes=2)),
                data={"step": 1, "action": "stop", "stop_reason": "task complete"},
            ),
        ],
    )
    catchup.catch_up()
    live = alice_page.get("/runs/live/").content.decode()
    assert 'hx-trigger="every 5s"' in live and "live-badge" in live
    done = alice_page.get("/runs/done/").content.decode()
    assert "hx-trigger" not in done and "the router stopped the run" in done
    # The poll answers with the live part alone, new records included.
    post(
        alice,
        [
            record(
                "turn",
                run_id="live",
                ts=iso(now - timedelta(minutes=1)),
                data={"text": "a new turn arrived"},
            )
        ],
    )
    poll = alice_page.get("/runs/live/", HTTP_HX_REQUEST="true").content.decode()
    assert poll.startswith('\n<div id="run-live"') or '<div id="run-live"' in poll[:200]
    assert "a new turn arrived" in poll and "<html" not in poll


def test_it_pages_a_long_runs_timeline(alice, alice_page):
    # A live run: its last record is two minutes old, and no stop.
    n = timeline.PAGE_SIZE + 20
    t = timezone.now().replace(microsecond=0) - timedelta(seconds=n + 120)
    post(
        alice,
        [
            record(
                "tool_choice.outcome",
                run_id="long",
                ts=iso(t + timedelta(seconds=i)),
                data={"iteration": i // 7, "called": ["grep"]},
            )
            for i in range(n)
        ],
    )
    catchup.catch_up()
    first = alice_page.get("/runs/long/").content.decode()
    assert first.count('<tr class="record ') == timeline.PAGE_SIZE
    assert f"records 1–{timeline.PAGE_SIZE} shown" in first and 'href="?page=2"' in first
    assert "hx-trigger" not in first  # a live run's first page does not grow: no polling
    second = alice_page.get("/runs/long/?page=2").content.decode()
    assert second.count('<tr class="record ') == 20
    # Seven records an iteration: the page opens in the middle of one begun on page 1.
    assert f"<h3>Iteration {timeline.PAGE_SIZE // 7} (continued)</h3>" in second
    assert 'hx-get="/runs/long/?page=2" hx-trigger="every 5s"' in second


def test_it_shows_a_failed_pick(alice, alice_page):
    t = timezone.now().replace(microsecond=0) - timedelta(minutes=5)
    post(alice, [record("tool_choice.pick_error", run_id="r2", ts=iso(t))])
    catchup.catch_up()
    page = alice_page.get("/runs/r2/picks/1/").content.decode()
    assert "The classifier call failed" in page and "529 overloaded" in page
    assert "Narrowing was asked for but skipped: <strong>unavailable</strong>" in page
    assert "chart-ranked" not in page


def test_it_draws_the_ranked_distribution_of_a_pick(alice, alice_page):
    t = timezone.now().replace(microsecond=0) - timedelta(minutes=20)
    data = {
        "iteration": 3,
        "offered": ["search_docs", "read_file", "write_file", "grep"],
        "ranked": [{"name": "grep", "score": 0.6}, {"name": "search_docs", "score": 0.3}],
        "chosen": "grep",
        "served": ["grep", "search_docs", "read_skill", "present"],
        "narrowed": True,
        "usage": {"inputTokens": 812, "outputTokens": 9},
        "latencyMs": 140.5,
    }
    post(
        alice,
        [
            record("tool_choice.pick", run_id="r1", ts=iso(t), data={**data, "iteration": 2}),
            record("tool_choice.pick", run_id="r1", ts=iso(t + timedelta(seconds=1)), data=data),
            record(
                "tool_choice.outcome",
                run_id="r1",
                ts=iso(t + timedelta(seconds=2)),
                data={
                    "iteration": 3,
                    "called": ["write_file"],
                    "firstAgrees": False,
                    "miss": {"wanted": ["write_file"]},
                },
            ),
            record(
                "tool_choice.pick",
                run_id="r1",
                ts=iso(t + timedelta(seconds=3)),
                data={**data, "iteration": 5},
            ),
        ],
    )
    catchup.catch_up()
    page = alice_page.get("/runs/r1/picks/3/").content.decode()
    marks = {t["name"]: t["x"] for t in figure(page, "chart-ranked")["data"]}
    assert marks == {
        "chosen": ["grep"],
        "served": ["search_docs"],
        "offered, not served": ["read_file", "write_file"],
        "door (always served)": ["read_skill", "present"],
    }
    assert "812 in / 9 out" in page and "140 ms" in page
    assert "The first call was not the classifier's top pick." in page
    assert "Missed: write_file" in page
    assert 'href="/runs/r1/picks/2/" rel="prev"' in page
    assert 'href="/runs/r1/picks/5/" rel="next"' in page


# --- untrusted text -------------------------------------------------------------------------------
@pytest.mark.parametrize("url", ["/runs/evil-run/", "/runs/evil-run/picks/0/", "/runs/"])
def test_it_escapes_record_text(alice, alice_page, url):
    evil_run(alice)
    page = alice_page.get(url).content.decode()
    assert "<img src=x" not in page and "<script>alert" not in page
    if url == "/runs/evil-run/":
        assert (
            "&lt;script&gt;alert(&quot;text&quot;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;"
            in page
        )
    if "picks" in url:
        # In the figure JSON too: json_script escapes < > & so no markup survives.
        assert "\\u0026lt;img src=x onerror=alert(2)\\u0026gt;" in page
        names = figure(page, "chart-ranked")["data"][0]["x"]
        assert names == ["&lt;img src=x onerror=alert(2)&gt;"]  # shown as typed by plotly.js


@pytest.mark.parametrize("url", [*PAGES, "/runs/evil-run/", "/runs/evil-run/picks/0/"])
def test_it_runs_no_inline_script_and_sends_a_strict_policy(alice, alice_page, url):
    demo(alice)
    evil_run(alice)
    response = alice_page.get(url)
    policy = response[HEADER]
    assert (
        "script-src 'self';" in policy
        and "unsafe-inline'" not in policy.split("script-src")[1].split(";")[0]
    )
    assert "object-src 'none'" in policy and "frame-ancestors 'none'" in policy
    parsed = scripts_of(response.content.decode())
    for script in parsed.scripts:
        assert script.get("src") or script.get("type") == "application/json", script
        if script.get("src"):
            assert script["src"].startswith("/static/") and not script["body"].strip()
    assert parsed.handlers == []  # no onclick=, onerror=, ... anywhere


def test_it_relaxes_the_policy_for_the_api_docs_only(db):
    response = Client().get("/api/docs/")
    assert "script-src 'self' 'unsafe-inline'" in response[HEADER]
    assert "unsafe-inline" not in Client().get("/accounts/login/")[HEADER].split("style-src")[0]


# --- charts from rollups --------------------------------------------------------------------------
def test_it_compares_the_kpis_with_the_previous_period(alice, alice_page):
    now = timezone.now().replace(minute=30, second=0, microsecond=0)
    before = now - timedelta(hours=30)  # the previous 24 hours
    recent = now - timedelta(hours=2)
    post(
        alice,
        [
            *(record(run_id=f"old-{i}", ts=iso(before + timedelta(seconds=i))) for i in range(4)),
            *(
                record(
                    run_id=f"new-{i}",
                    ts=iso(recent + timedelta(seconds=i)),
                    data={"selected_model": "claude-haiku-4-5"} if i < 3 else {},
                )
                for i in range(6)
            ),
        ],
    )
    catchup.catch_up()
    data = page_rollups.overview(alice.project.pk, now, "24h", [])
    kpis = {k.name: k for k in data["kpis"]}
    assert (kpis["records"].value, kpis["records"].previous) == (6, 4)
    assert kpis["records"].change == pytest.approx(0.5)
    assert (kpis["runs"].value, kpis["runs"].previous) == (6, 4)
    assert kpis["swap_rate"].value == pytest.approx(0.5) and kpis["swap_rate"].previous == 0
    assert kpis["swap_rate"].change == pytest.approx(0.5)  # +50 points
    page = alice_page.get("/", {"period": "24h"}).content.decode()
    assert "+50 %" in page and "+50.0 pts" in page


def test_the_overview_kpis_agree_with_the_metrics_api(alice):
    demo(alice, records=900, runs=10, seed=5)
    now = timezone.now()
    start, end = page_rollups.overview_range(now, "24h")
    kpis = {k.name: k for k in page_rollups.overview(alice.project.pk, now, "24h", [])["kpis"]}
    params = {"from": iso(start), "to": iso(end), "interval": "hour"}
    for name in ("records", "pick_error_rate", "narrowing_skip_rate", "swap_rate",
                 "ladder_fallback_rate", "first_pick_agreement"):  # fmt: skip
        totals = alice.client(alice.read_key).get(f"/api/v1/metrics/{name}", params).json()
        totals = totals["totals"]
        if name == "records":
            want = sum(t["value"] for t in totals)
        else:  # the rate over every group: numerators and denominators added up
            count = sum(t["count"] for t in totals)
            want = sum(t["value"] * t["count"] for t in totals if t["value"] is not None) / count
        assert kpis[name].value == pytest.approx(want), name


def test_it_draws_the_overview_series_from_rollups(alice, alice_page):
    demo(alice, records=600, runs=8)
    page = alice_page.get("/", {"period": "6h"}).content.decode()
    kinds = {t["name"] for t in figure(page, "chart-records")["data"]}
    assert {"tool_choice.pick", "model_selection", "turn"} <= kinds
    total = sum(sum(t["y"]) for t in figure(page, "chart-records")["data"])
    assert total == 600
    rates = {t["name"] for t in figure(page, "chart-rates")["data"]}
    assert rates == {"ladder fallback", "narrowing skip", "swap", "pick error"}
    assert figure(page, "chart-latency")["data"]
    assert "Recent runs" in page


def test_it_shows_freshness_and_what_waits_to_be_rolled_up(alice, alice_page):
    demo(alice)
    assert (
        "Charts are up to date with every record received." in alice_page.get("/").content.decode()
    )
    post(alice, [record(run_id="late", ts=iso(timezone.now() - timedelta(minutes=1)))])
    assert "Records of this project wait to be rolled up" in alice_page.get("/").content.decode()


def test_it_names_each_queue_no_worker_serves(alice, alice_page):
    def stale_queues() -> list[str]:
        page = alice_page.get("/").content.decode()
        warning = re.search(r"No worker has served (.*?) in the last minute", page)
        if warning is None:
            return []
        named = re.findall(r"<code>(\w+)</code>", warning.group(1))
        assert f"--queues {','.join(named)}</code>" in page  # the command that serves them
        return named

    assert stale_queues() == ["default", "notifications", "exports"]  # no heartbeat ever
    heartbeat.beat("default")
    heartbeat.beat("exports", now=timezone.now() - timedelta(minutes=5))
    assert stale_queues() == ["notifications", "exports"]
    for queue in ("notifications", "exports"):
        heartbeat.beat(queue)
    assert stale_queues() == []
    assert 'class="ok" data-queue="exports">exports 0' in alice_page.get("/").content.decode()


def test_it_draws_the_swap_matrix_paths_and_refusals(alice, alice_page):
    t = timezone.now().replace(microsecond=0) - timedelta(minutes=40)
    # (default, selected, previous): two runs of sonnet swapping to gpt-5, one of gpt-5.
    selections = [
        ("claude-sonnet-4-5", "claude-sonnet-4-5", None),
        ("claude-sonnet-4-5", "gpt-5", "claude-sonnet-4-5"),
        ("claude-sonnet-4-5", "gpt-5", "gpt-5"),
        ("gpt-5", "gpt-5", None),
        ("gpt-5", "gpt-5", "gpt-5"),
    ]
    post(
        alice,
        [
            *(
                record(
                    ts=iso(t + timedelta(seconds=i)),
                    data={"default_model": d, "selected_model": s, "previous_model": p},
                )
                for i, (d, s, p) in enumerate(selections)
            ),
            *(record("provider.error", ts=iso(t + timedelta(seconds=10 + i))) for i in range(3)),
            record(
                "provider.error",
                ts=iso(t + timedelta(seconds=20)),
                data={
                    "error": "RateLimitError",
                    "toolChoice": None,
                    "provider": "openai",
                    "model": "gpt-5",
                },
            ),
        ],
    )
    catchup.catch_up()
    page = alice_page.get("/models/").content.decode()
    matrix = figure(page, "chart-swap-matrix")["data"][0]
    cells = {
        (y, x): matrix["z"][i][j]
        for i, y in enumerate(matrix["y"])
        for j, x in enumerate(matrix["x"])
    }
    # Swaps only: the kept selections (the diagonal) are counted in the row's label, and do
    # not colour a cell (so they never set the scale that a real swap is read against).
    assert cells[("claude-sonnet-4-5 (kept 1)", "gpt-5")] == 2
    assert matrix["x"] == ["gpt-5"]
    assert matrix["text"][0] == ["2 · 67%"]  # two of sonnet's three selections
    [sankey] = figure(page, "chart-paths")["data"]
    labels = sankey["node"]["label"]
    edges = {
        (labels[a], labels[b]): n
        for a, b, n in zip(
            sankey["link"]["source"], sankey["link"]["target"], sankey["link"]["value"], strict=True
        )
    }
    assert edges == {
        ("(start) →", "→ claude-sonnet-4-5"): 1,
        ("(start) →", "→ gpt-5"): 1,
        ("claude-sonnet-4-5 →", "→ gpt-5"): 1,
        ("gpt-5 →", "→ gpt-5"): 2,
    }
    refusals = figure(page, "chart-refusals")["data"]
    assert [(t["name"], t["x"], t["y"]) for t in refusals] == [
        ("anthropic", ["claude-opus-5-5"], [3])
    ]
    assert "RateLimitError" in page


def test_it_charts_classifier_causes_and_reasons(alice, alice_page):
    t = timezone.now().replace(microsecond=0) - timedelta(minutes=40)
    notices = [
        (
            "classifier.unavailable",
            {"toolName": "x", "toolCallId": "c", "cause": "timeout", "disposition": "asked"},
        ),
        (
            "classifier.unavailable",
            {"toolName": "x", "toolCallId": "d", "cause": "timeout", "disposition": "denied"},
        ),
        (
            "classifier.unavailable",
            {"toolName": "x", "toolCallId": "e", "cause": "error", "disposition": "asked"},
        ),
        ("classifier.role_defaulted", {"reason": "tier_table", "model": "qwen3-8b"}),
    ]
    post(
        alice,
        [
            *(
                record(
                    "notice",
                    ts=iso(t + timedelta(seconds=i)),
                    data={"code": code, "detail": detail, "message": "m"},
                )
                for i, (code, detail) in enumerate(notices)
            ),
            *(
                record(
                    "tool_choice.pick",
                    ts=iso(t + timedelta(seconds=10 + i)),
                    data={"latencyMs": 100.0 + i},
                )
                for i in range(5)
            ),
            record(
                "classifier.verdict",
                ts=iso(t + timedelta(seconds=30)),
                data={"outcome": "parse_error", "verdict": None, "form": "missing"},
            ),
        ],
    )
    catchup.catch_up()
    page = alice_page.get("/classifiers/").content.decode()
    unavailable = {
        tr["name"]: dict(zip(tr["x"], tr["y"], strict=True))
        for tr in figure(page, "chart-unavailable")["data"]
    }
    assert unavailable == {
        "asked": {"error": 1, "timeout": 1},
        "denied": {"error": 0, "timeout": 1},
    }
    roles = figure(page, "chart-role-defaulted")["data"]
    assert [(r["name"], r["x"], r["y"]) for r in roles] == [("qwen3-8b", ["tier_table"], [1])]
    verdicts = {tr["name"]: tr["y"] for tr in figure(page, "chart-verdicts")["data"]}
    assert verdicts == {"parse_error": [1]}
    assert figure(page, "chart-classifier-latency")["data"][0]["name"] == "claude-haiku-4-5 p50"
    latency = page_rollups.classifiers_page(alice.project.pk, timezone.now(), "24h", [])
    [totals] = latency["latency_totals"]  # lower nearest rank of 100..104 ms, within 1 %
    assert totals["count"] == 5 and totals["p50"] == pytest.approx(102, rel=0.01)
    assert totals["p99"] == pytest.approx(103, rel=0.01)


def test_it_charts_the_ladder_fallbacks_by_what_the_seat_last_came_to(alice, alice_page):
    start = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    post(alice, ladders("v1", start, 4, 2, 1))  # two timeouts, a parse error, a ruling
    catchup.catch_up()
    page = alice_page.get("/classifiers/").content.decode()
    (bars,) = figure(page, "chart-ladder-causes")["data"]
    assert dict(zip(bars["x"], bars["y"], strict=True)) == {"parse_error": 0.25, "timeout": 0.5}
    assert bars["customdata"] == [4, 4]  # of all four classifications


def test_it_shows_streaks_with_a_sparkline_and_the_runs_behind_them(alice, alice_page):
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    # (hours ago, minute, outcome): the streak ends those hours at 2, then 1, then 3.
    verdicts = [
        (3, 10, "ruled"), (3, 20, "parse_error"), (3, 30, "parse_error"),
        (2, 10, "ruled"), (2, 20, "parse_error"),
        (1, 10, "parse_error"), (1, 20, "parse_error"),
    ]  # fmt: skip
    post(
        alice,
        [
            record(
                "classifier.verdict",
                run_id=f"v-{i}",
                ts=iso(hour - timedelta(hours=ago) + timedelta(minutes=minute)),
                data={
                    "outcome": o,
                    "verdict": "allow" if o == "ruled" else None,
                    "form": None if o == "ruled" else "missing",
                },
            )
            for i, (ago, minute, o) in enumerate(verdicts)
        ],
    )
    catchup.catch_up()
    page = alice_page.get("/streaks/").content.decode()
    assert re.search(r'<td>qwen3-8b</td>\s*<td class="num">3</td>\s*<td class="num">3</td>', page)
    traces = {t["name"]: t["y"] for t in figure(page, "spark-0")["data"]}
    spark, peaks = traces["at the end of the hour"], traces["highest in the hour"]
    assert spark[-4:] == [2, 1, 3, 3]  # the end of each of the last hours, this one included
    assert set(spark[:-4]) == {0}
    assert peaks[-4:] == [2, 2, 3, 3]  # the second hour starts at the 2 carried into it
    assert 'href="/runs/?project=acme&amp;model=qwen3-8b&amp;has=contract_break"' in page
    runs = alice_page.get("/runs/?model=qwen3-8b&has=contract_break").content.decode()
    shown = re.findall(RUN_LINK, runs)
    assert sorted(shown) == ["v-1", "v-2", "v-4", "v-5", "v-6"]  # the parse errors


def test_the_streaks_page_charts_any_time_range(alice, alice_page):
    """The time-range control of every chart page: a custom range two weeks back shows the
    streak hour by hour there."""
    then = (timezone.now() - timedelta(days=14)).replace(minute=0, second=0, microsecond=0)
    broken = {"outcome": "parse_error", "verdict": None, "form": "missing"}
    post(
        alice,
        [
            record("classifier.verdict", ts=iso(then + timedelta(minutes=m)), data=broken)
            for m in (5, 10)
        ],
    )
    catchup.catch_up()
    query = {
        "period": "custom",
        "from": (then - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M"),
        "to": (then + timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M"),
    }
    page = alice_page.get("/streaks/", query).content.decode()
    traces = {t["name"]: t["y"] for t in figure(page, "spark-0")["data"]}
    assert traces["at the end of the hour"] == [0, 0, 2, 2, 2]  # 2 h before, then the burst


# --- query counts ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "url, most",
    [
        # session, user, projects, then: records by kind, the rate rows of the period and of
        # the one before, the pick sketches, the runs' counts, the spend, recent runs, the
        # project's freshness (one statement), heartbeat, firing alerts, the release markers
        ("/", 15),
        ("/runs/", 4),  # session, user, projects, the page of runs
        ("/runs/?model=qwen3-8b&has=swap,error&sort=record_count", 4),
        # session, user, projects, counts, model-call sketches, spend, the release markers
        ("/models/", 7),
        ("/classifiers/", 6),  # session, user, projects, counts, pick sketches, release markers
        ("/streaks/", 6),  # session, user, projects, streaks, day segments, hour segments
    ],
)
def test_list_pages_cost_the_same_queries_however_much_data(
    alice, alice_page, django_assert_max_num_queries, url, most
):
    demo(alice, records=200, runs=4, seed=1)
    with django_assert_max_num_queries(most):
        assert alice_page.get(url).status_code == 200
    demo(alice, records=1500, runs=40, seed=2)
    with django_assert_max_num_queries(most):
        assert alice_page.get(url).status_code == 200


def test_a_run_and_a_pick_cost_the_same_queries_however_long_the_run(
    alice, alice_page, django_assert_max_num_queries
):
    demo(alice, records=1200, runs=3)
    runs = Run.objects.filter(project=alice.project, kind_counts__has_key="tool_choice.pick")
    for run in (runs.order_by("record_count").first(), runs.order_by("-record_count").first()):
        # session, user, projects, the run, its records, its sub-runs
        with django_assert_max_num_queries(6):
            assert alice_page.get(f"/runs/{run.run_id}/").status_code == 200
        # session, user, projects, the run, the records of the iteration, the pick iterations
        with django_assert_max_num_queries(6):
            assert alice_page.get(f"/runs/{run.run_id}/picks/0/").status_code == 200


# --- pure parts -----------------------------------------------------------------------------------
def _rec(i: int, kind: str, iteration: int | None, **data) -> dict:
    return {
        "id": i,
        "kind": kind,
        "ts": datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=i),
        "iteration": iteration,
        "model": None,
        "latency_ms": None,
        "tokens_in": None,
        "tokens_out": None,
        "is_swap": False,
        "is_fallback": False,
        "is_error": False,
        "is_contract_break": False,
        "data": data,
        "derived": {},
    }


def test_it_puts_each_record_where_it_happened():
    records = [
        _rec(0, "notice", None, code="a", message="before anything"),
        _rec(1, "model_selection", 0, step=0, action="continue"),
        _rec(2, "tool_choice.pick", 0),
        _rec(3, "turn", None, text="hello"),
        _rec(4, "model_selection", 1, step=1, action="stop"),
        _rec(5, "classifier.verdict", None, toolName="t", outcome="ruled", verdict="allow"),
    ]
    built = timeline.build(records, records[0]["ts"])
    assert [(it.label, [i.id for i in it.items]) for it in built] == [
        ("before the first iteration", [0]),
        ("iteration 0", [1, 2, 3]),
        ("iteration 1", [4, 5]),
    ]
    assert built[1].items[2].offset_ms == 3000 and built[1].items[1].pick_iteration == 0
    assert timeline.stopped(records)


def test_it_describes_a_turn_with_its_invented_calls():
    title, details = timeline.describe(
        "turn",
        {"text": "hi", "protocol": "hybrid"},
        {
            "decision": "action",
            "protocol": "hybrid",
            "calls": [{"wire": "a", "action": "a"}, {"wire": "x", "action": "x", "invented": True}],
        },
    )
    assert title == "turn: action"
    assert ("calls", "a, x (invented)") in details and ("text", "hi") in details


def test_it_shows_markup_in_chart_labels_as_typed():
    fig = category_charts.ranked(
        {
            "ranked": [{"name": "<b>x</b>", "score": 1.0}],
            "offered": ["<b>x</b>"],
            "served": ["<b>x</b>"],
            "chosen": "<b>x</b>",
            "doors": [],
        }
    )
    assert fig["data"][0]["x"] == ["&lt;b&gt;x&lt;/b&gt;"]

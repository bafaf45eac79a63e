"""The operator pages in a real browser: log in, filter, drill down, switch project, see charts.

Each test asserts what an operator would see, that every chart was drawn (plotly.js puts an
<svg class="main-svg"> in its div), and that the page logged no error: a Content-Security-Policy
violation, a failed load or an uncaught exception all show up in the console. The screenshots
of docs/screenshots/ are taken here.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from playwright.sync_api import Page, expect

from dashboard.queries.timeline import PAGE_SIZE
from records import catchup
from records.demo.generator import generate_records
from records.models import Membership, Project, Record, Run
from tests.browser.conftest import Console, screenshot
from tests.support.browser import PASSWORD, charts_drawn, log_in, store

pytestmark = pytest.mark.usefixtures("transactional_db")

EVIL_TEXT = '<script>alert("text")</script><img src=x onerror=alert(1)>'
EVIL_TOOL = "<img src=x onerror=alert(2)>"


def evil_records(at) -> list[dict]:
    """A run whose record text is markup: a turn's text and a ranked tool name."""
    base = {"run_id": "evil-run", "agent": "support-bot", "session_id": "s-evil"}
    pick = {
        "iteration": 0,
        "source": "classifier",
        "classifier": {"name": "anthropic", "model": "claude-haiku-4-5"},
        "offered": ["search_docs", EVIL_TOOL, "grep"],
        "ranked": [{"name": EVIL_TOOL, "score": 0.7}, {"name": "grep", "score": 0.2}],
        "chosen": EVIL_TOOL,
        "confidence": 0.7,
        "latencyMs": 120.0,
        "served": [EVIL_TOOL, "grep", "read_skill"],
        "narrowed": True,
    }
    turn = {"protocol": "hybrid", "text": EVIL_TEXT, "durationMs": 900.0}
    return [
        {**base, "id": "evil-1", "kind": "tool_choice.pick", "ts": at(0), "data": pick},
        {**base, "id": "evil-2", "kind": "turn", "ts": at(1), "data": turn},
    ]


@pytest.fixture
def site(live_server):
    """acme with demo runs and the markup run, globex with its own; carol is in both."""
    now = timezone.now().replace(microsecond=0)
    acme = Project.objects.create(name="acme")
    globex = Project.objects.create(name="globex")
    end = now - timedelta(minutes=2)
    store(acme, list(generate_records(records=1500, runs=18, seed=3, end=end,
                                      span=timedelta(hours=5))))  # fmt: skip
    store(globex, list(generate_records(records=300, runs=4, seed=4, end=end,
                                        span=timedelta(hours=5))))  # fmt: skip

    def at(seconds: int) -> str:
        return (now - timedelta(minutes=30) + timedelta(seconds=seconds)).isoformat()

    store(acme, evil_records(at))
    catchup.catch_up()
    carol = get_user_model().objects.create_user("carol", password=PASSWORD)
    Membership.objects.create(user=carol, project=acme, role="admin")
    Membership.objects.create(user=carol, project=globex, role="admin")
    return {"url": live_server.url, "acme": acme, "globex": globex}


def test_it_logs_in_and_draws_the_overview(page: Page, site, console: Console):
    log_in(page, site, console)
    expect(page.locator(".kpi").first).to_be_visible()
    expect(page.locator(".kpi-label").first).to_have_text("Records")
    # Records by kind, classifier latency, the rates and spend by model.
    assert charts_drawn(page) == 4
    expect(page.locator("[data-unknown-share]")).to_contain_text(
        "of records with usage have no known price"
    )
    expect(page.locator("h2", has_text="Recent runs")).to_be_visible()
    screenshot(page, "overview")
    # The period selector swaps the charts in place and keeps the choice in the URL.
    page.select_option("select[name=period]", "24h")
    expect(page).to_have_url(re.compile(r"period=24h"))
    expect(page.locator(".range")).to_contain_text("Last 24 hours")
    charts_drawn(page)
    assert console.take() == []


def test_it_filters_the_runs_and_keeps_the_filters_in_the_url(page: Page, site, console):
    log_in(page, site, console)
    page.click("nav.pages >> text=Runs")
    expect(page.locator("h1")).to_contain_text("Runs")
    all_rows = page.locator("tr.run-row").count()
    assert all_rows == Run.objects.filter(project=site["acme"]).count()
    page.check("input[name=has][value=swap]")
    expect(page).to_have_url(re.compile(r"has=swap"))
    swapped = Run.objects.filter(project=site["acme"], has_swap=True).count()
    expect(page.locator("tr.run-row")).to_have_count(swapped)
    for flags in page.locator("tr.run-row td.flags").all_inner_texts():
        assert "swap" in flags
    page.fill("input[name=agent]", "support-bot")
    page.click("form.runs-filters button[type=submit]")
    expect(page).to_have_url(re.compile(r"agent=support-bot"))
    want = Run.objects.filter(project=site["acme"], has_swap=True, agent="support-bot").count()
    expect(page.locator("tr.run-row")).to_have_count(want)
    export = page.locator("a", has_text="Export these records")
    expect(export).to_have_attribute(
        "href", re.compile(r"/exports/\?project=acme&agent=support-bot&has=swap")
    )
    screenshot(page, "runs")
    # The URL alone restores the view: reload it.
    page.reload()
    expect(page.locator("input[name=agent]")).to_have_value("support-bot")
    expect(page.locator("input[name=has][value=swap]")).to_be_checked()
    assert console.take() == []


def test_it_opens_a_run_then_a_pick_and_draws_the_ranked_chart(page: Page, site, console):
    log_in(page, site, console)
    run = (
        Run.objects.filter(project=site["acme"], kind_counts__has_key="tool_choice.pick")
        .exclude(run_id="evil-run")
        .order_by("-record_count")
        .first()
    )
    page.goto(f"{site['url']}/runs/?run_id={run.run_id}")
    page.click(f"tr.run-row >> text={run.run_id}")
    expect(page.locator("h1")).to_contain_text(run.run_id)
    # The page shows a run's records PAGE_SIZE at a time.
    expect(page.locator("tr.record")).to_have_count(min(run.record_count, PAGE_SIZE))
    expect(page.locator(".iteration h3").first).to_be_visible()
    charts_drawn(page)
    screenshot(page, "run_detail", full_page=False)  # the top: a run has hundreds of rows
    page.locator("tr.kind-tool_choicepick .title a").first.click()
    expect(page.locator("h1")).to_contain_text("Pick at iteration")
    chart = page.locator("#chart-ranked")
    expect(chart.locator("svg.main-svg").first).to_be_attached()
    expect(chart.locator("g.point").first).to_be_attached()  # the bars
    expect(chart.locator(".legendtext", has_text="chosen")).to_be_attached()
    screenshot(page, "pick")
    following = page.locator("a[rel=next]")
    if following.count():
        following.click()
        expect(page.locator("h1")).to_contain_text("Pick at iteration")
        expect(page.locator("#chart-ranked svg.main-svg, .panel .error").first).to_be_attached()
    assert console.take() == []


def test_it_switches_project(page: Page, site, console):
    log_in(page, site, console)
    page.click("nav.pages >> text=Runs")
    expect(page.locator("h1")).to_contain_text("acme")
    page.select_option("header select[name=project]", "globex")
    expect(page.locator("h1")).to_contain_text("globex")
    expect(page).to_have_url(re.compile(r"/runs/$"))
    globex_runs = set(Run.objects.filter(project=site["globex"]).values_list("run_id", flat=True))
    shown = set(page.locator("tr.run-row td:first-child").all_inner_texts())
    assert shown == globex_runs
    assert console.take() == []


def test_it_shows_record_markup_as_text(page: Page, site, console):
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    log_in(page, site, console)
    page.goto(site["url"] + "/runs/evil-run/")
    expect(page.locator("tr.kind-turn dd", has_text=EVIL_TEXT)).to_be_visible()
    assert page.locator("img[src=x]").count() == 0
    page.goto(site["url"] + "/runs/evil-run/picks/0/")
    chart = page.locator("#chart-ranked")
    expect(chart.locator(".xtick text", has_text=EVIL_TOOL)).to_be_attached()
    expect(page.locator("dd", has_text=EVIL_TOOL).first).to_be_visible()
    assert page.locator("img[src=x]").count() == 0
    assert dialogs == []
    assert console.take() == []


@pytest.mark.parametrize("path, name", [("/models/", "models"), ("/classifiers/", "classifiers"),
                                        ("/streaks/", "streaks")])  # fmt: skip
def test_it_draws_every_chart_page(page: Page, site, console, path, name):
    log_in(page, site, console)
    page.goto(site["url"] + path)
    assert charts_drawn(page) >= 3
    screenshot(page, name)
    assert console.take() == []


def test_it_adds_records_to_a_live_run(page: Page, site, console):
    now = timezone.now().replace(microsecond=0)
    store(site["acme"], [
        {"id": "live-1", "kind": "model_selection", "run_id": "live-run", "agent": "support-bot",
         "ts": (now - timedelta(seconds=30)).isoformat(),
         "data": {"step": 0, "default_model": "gpt-5", "selected_model": "gpt-5",
                  "action": "continue"}},
    ])  # fmt: skip
    log_in(page, site, console)
    page.goto(site["url"] + "/runs/live-run/")
    expect(page.locator(".live-badge")).to_be_visible()
    expect(page.locator("tr.record")).to_have_count(1)
    store(site["acme"], [
        {"id": "live-2", "kind": "turn", "run_id": "live-run", "agent": "support-bot",
         "ts": now.isoformat(), "data": {"protocol": "hybrid", "text": "a turn that just arrived"}},
    ])  # fmt: skip
    expect(page.locator("tr.record", has_text="a turn that just arrived")).to_be_visible(
        timeout=15_000
    )
    assert Record.objects.filter(run_id="live-run").count() == 2
    assert console.take() == []


@pytest.mark.parametrize("path", ["/alerts/", "/exports/"])
def test_the_pages_beside_them_log_no_error_under_the_policy(page: Page, site, console, path):
    # The alerts and exports pages share the header, htmx and the Content-Security-Policy.
    log_in(page, site, console)
    page.goto(site["url"] + path)
    expect(page.locator("header select[name=project]")).to_have_value("acme")
    page.wait_for_load_state("networkidle")
    assert console.take() == []

"""What an operator notices (issue 13): any time range, live pages, tables that fit the screen,
rates in per cent on the alert pages, and API keys made and revoked in the UI.

Chromium (Debian's, tests/browser/conftest.py) against pytest-django's live server.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import requests
from django.contrib.auth import get_user_model
from django.utils import timezone
from playwright.sync_api import Page, expect

from records import rollup
from records.demo import generate_records
from records.models import Membership, Project, Run
from tests.browser.conftest import Console, screenshot
from tests.browser.test_pages_in_browser import PASSWORD, charts_drawn, store

pytestmark = pytest.mark.usefixtures("transactional_db")


@pytest.fixture
def acme(live_server):
    """acme: recent demo runs, and an incident two weeks ago; carol is its operator."""
    now = timezone.now().replace(microsecond=0)
    acme = Project.objects.create(name="acme")
    store(acme, list(generate_records(records=900, runs=10, seed=5, end=now - timedelta(minutes=3),
                                      span=timedelta(hours=3))))  # fmt: skip
    carol = get_user_model().objects.create_user("carol", password=PASSWORD)
    Membership.objects.create(user=carol, project=acme)
    return {"url": live_server.url, "project": acme, "now": now}


def old_incident(project: Project, now) -> None:
    """Swaps and picks of one run, 14 days before `now`."""
    end = now - timedelta(days=14)
    raw = [
        {**r, "run_id": f"old-{r['run_id']}", "id": f"old-{r['id']}"}
        for r in generate_records(records=300, runs=3, seed=9, end=end, span=timedelta(hours=2))
    ]
    store(project, raw)


def log_in(page: Page, url: str, console: Console) -> None:
    page.goto(url + "/accounts/login/")
    page.fill("input[name=username]", "carol")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_contain_text("Overview")
    assert console.take() == []


def test_it_charts_two_week_old_data_in_a_custom_range(page: Page, live_server, console):
    now = timezone.now().replace(microsecond=0)
    project = Project.objects.create(name="acme")
    old_incident(project, now)
    rollup.catch_up()
    carol = get_user_model().objects.create_user("carol", password=PASSWORD)
    Membership.objects.create(user=carol, project=project)
    log_in(page, live_server.url, console)
    page.goto(live_server.url + "/models/")
    # The last 6 hours are empty: the page says so, and draws no axes at all.
    expect(page.locator(".empty-period")).to_contain_text("No records in this period")
    assert page.locator("svg.main-svg").count() == 0
    assert page.locator(".empty-chart").count() >= 3
    screenshot(page, "empty_period")
    # The time-range control: a custom range two weeks back, kept in the URL.
    start = (now - timedelta(days=15)).strftime("%Y-%m-%dT%H:%M")
    end = (now - timedelta(days=13)).strftime("%Y-%m-%dT%H:%M")
    page.select_option("select[name=period]", "custom")
    page.fill("input[name=from]", start)
    page.fill("input[name=to]", end)
    page.click("form.filters button[type=submit]")
    expect(page).to_have_url(re.compile(r"period=custom&from=.*&to="))
    expect(page.locator("#chart-swap-matrix svg.main-svg").first).to_be_attached()
    assert charts_drawn(page) >= 2
    expect(page.locator(".empty-period")).to_have_count(0)
    screenshot(page, "models_custom_range")
    # The URL alone restores it.
    page.reload()
    expect(page.locator("select[name=period]")).to_have_value("custom")
    expect(page.locator("input[name=from]")).to_have_value(start)
    expect(page.locator("#chart-swap-matrix svg.main-svg").first).to_be_attached()
    assert console.take() == []


def test_an_empty_period_offers_the_latest_data(page: Page, live_server, console):
    now = timezone.now().replace(microsecond=0)
    project = Project.objects.create(name="acme")
    old_incident(project, now)
    rollup.catch_up()
    carol = get_user_model().objects.create_user("carol", password=PASSWORD)
    Membership.objects.create(user=carol, project=project)
    log_in(page, live_server.url, console)
    for path in ("/", "/classifiers/"):
        page.goto(live_server.url + path)
        expect(page.locator(".empty-period")).to_be_visible()
        assert page.locator("svg.main-svg").count() == 0  # no bogus axes (year 2000, 400 %)
    page.click("a.jump")
    expect(page).to_have_url(re.compile(r"/classifiers/\?period=custom"))
    assert charts_drawn(page) >= 3
    expect(page.locator(".empty-period")).to_have_count(0)
    # The runs list: the same control, the same way out.
    page.goto(live_server.url + "/runs/?period=24h")
    expect(page.locator(".empty-period")).to_contain_text("No runs in this time range")
    page.click("a.jump")
    expect(page.locator("tr.run-row")).to_have_count(3)
    assert console.take() == []


def test_the_overview_updates_after_a_post_without_a_reload(page: Page, acme, console):
    rollup.catch_up()
    log_in(page, acme["url"], console)
    records = page.locator("[data-kpi=records] .kpi-value")
    before = int(records.inner_text().replace(",", ""))
    assert before > 0
    expect(page.locator("#overview-live .live-badge")).to_be_visible()
    # The in-progress hour is marked as such on the charts.
    expect(page.locator("#chart-records .annotation-text", has_text="in progress")).to_be_attached()
    page.evaluate("window.notReloaded = true")
    key = requests_key(acme["project"])
    now = timezone.now().replace(microsecond=0)
    body = {"records": [
        {"id": f"new-{i}", "kind": "notice", "run_id": "fresh-run", "agent": "support-bot",
         "ts": (now - timedelta(seconds=i)).isoformat(),
         "data": {"code": "demo.hello", "message": "hi", "detail": {}}}
        for i in range(7)
    ]}  # fmt: skip
    posted = requests.post(f"{acme['url']}/api/v1/records", json=body, timeout=30,
                           headers={"Authorization": f"Bearer {key}"})  # fmt: skip
    assert posted.json()["accepted"] == 7
    rollup.catch_up()  # what the worker does seconds after the post
    expect(records).to_have_text(f"{before + 7:,}", timeout=30_000)
    expect(page.locator("#overview-live td.run-id", has_text="fresh-run")).to_be_visible()
    assert page.evaluate("window.notReloaded") is True
    assert console.take() == []


def requests_key(project: Project) -> str:
    from records.models import ApiKey

    return ApiKey.issue(project, ApiKey.Scope.ALL)[1]


PAGES = (
    "/", "/runs/", "/runs/{run}/", "/runs/{run}/picks/{pick}/", "/models/", "/classifiers/",
    "/streaks/", "/alerts/", "/alerts/new/", "/alerts/events/", "/exports/", "/keys/",
)  # fmt: skip


@pytest.mark.parametrize("width", [375, 1024, 1440])
def test_no_page_scrolls_sideways(page: Page, acme, console, width):
    rollup.catch_up()
    run = (
        Run.objects.filter(project=acme["project"], kind_counts__has_key="tool_choice.pick")
        .order_by("-record_count")
        .first()
    )
    pick = run.project.records.filter(run_id=run.run_id, kind="tool_choice.pick").first()
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(acme["url"] + "/accounts/login/")
    assert overflow(page) == 0, "/accounts/login/"
    log_in(page, acme["url"], console)
    for path in PAGES:
        url = acme["url"] + path.format(run=run.run_id, pick=pick.iteration)
        page.goto(url)
        page.wait_for_load_state("networkidle")
        assert overflow(page) == 0, f"{path} at {width} px scrolls sideways"
    if width == 1024:
        # The triage columns of the runs list are on screen without scrolling.
        page.goto(acme["url"] + "/runs/")
        for heading in ("Flags", "Models"):
            box = page.locator("table.runs th", has_text=heading).bounding_box()
            assert box and box["x"] + box["width"] <= width, heading
        screenshot(page, "runs_1024", full_page=False)
    if width == 375:
        page.goto(acme["url"] + "/runs/")
        screenshot(page, "runs_phone", full_page=False)
    assert console.take() == []


def overflow(page: Page) -> int:
    """How far the page itself scrolls sideways, in CSS pixels."""
    return page.evaluate(
        "Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"
        " - document.documentElement.clientWidth"
    )

"""What an operator notices: any time range, live pages, tables that fit the screen,
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

from alerts import engine
from alerts.models import Rule
from records import catchup
from records.demo.generator import generate_records
from records.models import ApiKey, Membership, Project, Run
from tests.browser.conftest import Console, screenshot
from tests.support.browser import PASSWORD, charts_drawn, store

pytestmark = pytest.mark.usefixtures("transactional_db")


@pytest.fixture
def acme(live_server):
    """acme: recent demo runs, and an incident two weeks ago; carol is its operator."""
    now = timezone.now().replace(microsecond=0)
    acme = Project.objects.create(name="acme")
    store(acme, list(generate_records(records=900, runs=10, seed=5, end=now - timedelta(minutes=3),
                                      span=timedelta(hours=3))))  # fmt: skip
    carol = get_user_model().objects.create_user("carol", password=PASSWORD)
    Membership.objects.create(user=carol, project=acme, role="admin")
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
    catchup.catch_up()
    carol = get_user_model().objects.create_user("carol", password=PASSWORD)
    Membership.objects.create(user=carol, project=project, role="admin")
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
    catchup.catch_up()
    carol = get_user_model().objects.create_user("carol", password=PASSWORD)
    Membership.objects.create(user=carol, project=project, role="admin")
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
    catchup.catch_up()
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
    catchup.catch_up()  # what the worker does seconds after the post
    expect(records).to_have_text(f"{before + 7:,}", timeout=30_000)
    expect(page.locator("#overview-live td.run-id", has_text="fresh-run")).to_be_visible()
    assert page.evaluate("window.notReloaded") is True
    assert console.take() == []


def requests_key(project: Project) -> str:
    return ApiKey.issue(project, ApiKey.Scope.ALL)[1]


PAGES = (
    "/", "/runs/", "/runs/{run}/", "/runs/{run}/picks/{pick}/", "/models/", "/classifiers/",
    "/streaks/", "/alerts/", "/alerts/new/", "/alerts/events/", "/exports/", "/keys/",
)  # fmt: skip


@pytest.mark.parametrize("width", [375, 1024, 1440])
def test_no_page_scrolls_sideways(page: Page, acme, console, width):
    catchup.catch_up()
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
        charts_drawn(page)
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


def picks_and_errors(picks: int, errors: int, now) -> list[dict]:
    """`picks` classifier picks and `errors` failed ones, in the few minutes before `now`."""
    base = {"run_id": "rate-run", "agent": "support-bot"}
    pick = {"iteration": 0, "source": "classifier",
            "classifier": {"name": "anthropic", "model": "claude-haiku-4-5"},
            "offered": ["search_docs", "grep"], "ranked": [{"name": "grep", "score": 0.7}],
            "chosen": "grep", "confidence": 0.7, "latencyMs": 120.0, "served": ["grep"],
            "narrowed": True}  # fmt: skip
    error = {"iteration": 0, "classifier": {"name": "anthropic", "model": "claude-haiku-4-5"},
             "message": "overloaded", "latencyMs": 900.0, "served": ["grep"]}  # fmt: skip
    out = []
    for i in range(picks + errors):
        kind, data = ("tool_choice.pick", pick) if i < picks else ("tool_choice.pick_error", error)
        ts = (now - timedelta(minutes=3) + timedelta(seconds=i)).isoformat()
        out.append({**base, "id": f"rate-{i}", "kind": kind, "ts": ts, "data": data})
    return out


@pytest.fixture
def quiet(live_server):
    """acme with no records yet; carol is its operator."""
    acme = Project.objects.create(name="acme")
    carol = get_user_model().objects.create_user("carol", password=PASSWORD)
    Membership.objects.create(user=carol, project=acme, role="admin")
    return {"url": live_server.url, "project": acme}


def test_a_rate_rule_entered_as_10_percent_fires_at_10_percent(page: Page, quiet, console):
    acme = quiet
    log_in(page, acme["url"], console)
    page.goto(acme["url"] + "/alerts/new/")
    # The form starts on the project the operator is looking at.
    expect(page.locator(".rule-form select[name=project]")).to_have_value("acme")
    page.fill("input[name=name]", "pick errors at 10 %")
    page.select_option("select[name=metric]", "pick_error_rate")
    expect(page.locator(".field-threshold [data-unit]")).to_have_text("%")
    page.select_option("select[name=comparator]", "gte")
    page.fill("input[name=threshold]", "10")
    page.fill("input[name=window_minutes]", "60")
    screenshot(page, "alert_rule")
    page.click("button[name=save]")
    expect(page.locator(".messages")).to_contain_text("Saved")
    expect(page.locator("p.rule-summary")).to_contain_text("pick error rate ≥ 10 % over 60 min")
    # The API keeps the fraction.
    assert Rule.objects.get(name="pick errors at 10 %").threshold == 0.1
    # 1 failed pick in 10: a pick error rate of exactly 10 %.
    store(acme["project"], picks_and_errors(9, 1, timezone.now()))
    catchup.catch_up()
    engine.evaluate_all()
    page.reload()
    expect(page.locator("p.rule-summary .state-firing")).to_be_visible()
    expect(page.locator("table td", has_text="10.0 %").first).to_be_visible()
    expect(page.locator("table.events")).to_contain_text("≥ 10 %")
    # The preview, in the house style: a percentage axis, the would-fire crosses drawn.
    expect(page.locator("#alert-preview .ytick text", has_text="%").first).to_be_attached()
    expect(page.locator("#alert-preview .legendtext", has_text="would fire")).to_be_attached()
    screenshot(page, "alert_preview")
    # The overview's firing alerts speak in per cent too.
    page.goto(acme["url"] + "/")
    expect(page.locator(".firing-alerts")).to_contain_text("10.0 %")
    # Silenced, it is marked so wherever it is listed.
    page.goto(acme["url"] + "/alerts/")
    page.locator("tr", has_text="pick errors at 10 %").locator("button", has_text="Silence").click()
    expect(page.locator(".state-silenced").first).to_contain_text("silenced until")
    page.goto(acme["url"] + "/")
    expect(page.locator(".firing-alerts .state-silenced")).to_be_visible()
    assert console.take() == []


def test_an_api_key_is_made_used_and_revoked_in_the_ui(page: Page, acme, console):
    log_in(page, acme["url"], console)
    page.click("nav.pages >> text=Keys")
    expect(page.locator("h1")).to_have_text("API keys")
    page.fill("input[name=name]", "agent-7")
    page.select_option("select[name=scope]", "ingest")
    page.click("form.key-form button[type=submit]")
    secret = page.locator("#new-key").inner_text()
    assert secret.startswith("dbk_")
    expect(page.locator(".secret-once")).to_contain_text("ingest key for acme (agent-7)")
    row = page.locator("tr.key-row", has_text="agent-7")
    expect(row).to_contain_text("never")
    screenshot(page, "keys")

    def post() -> requests.Response:
        record = {"kind": "notice", "run_id": "key-run", "ts": timezone.now().isoformat(),
                  "data": {"code": "demo.hello", "message": "hi", "detail": {}}}  # fmt: skip
        return requests.post(f"{acme['url']}/api/v1/records", json=record, timeout=30,
                             headers={"Authorization": f"Bearer {secret}"})  # fmt: skip

    assert post().json()["accepted"] == 1
    page.reload()
    assert page.locator("#new-key").count() == 0  # shown once
    expect(row).not_to_contain_text("never")  # last used: just now
    row.locator("button", has_text="Revoke").click()
    expect(page.locator(".messages")).to_contain_text("Revoked")
    expect(page.locator("tr.key-row", has_text="agent-7")).to_contain_text("revoked")
    answer = post()
    assert answer.status_code == 401, answer.text
    assert console.take() == []

"""Comparing two runs from the runs list in a real browser, and the fallbacks and sessions pages
drawn without a console error (a Content-Security-Policy violation shows up as one)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from playwright.sync_api import Page, expect

from records import catchup
from records.models import Membership, Project
from tests.browser.conftest import Console
from tests.support.browser import PASSWORD, log_in, store

pytestmark = pytest.mark.usefixtures("transactional_db")


def run_records(run_id: str, served: list[str], selected: str, at) -> list[dict]:
    base = {"run_id": run_id, "agent": "support-bot", "session_id": "s-1"}
    offered = ["search_docs", "grep", "read_file"]
    ranked = [{"name": "search_docs", "score": 0.8}, {"name": "grep", "score": 0.2}]
    out = []
    for i in range(2):
        pick = {"iteration": i, "source": "classifier", "confidence": 0.8, "latencyMs": 90.0,
                "classifier": {"name": "c", "model": "claude-haiku-4-5"}, "offered": offered,
                "ranked": ranked, "chosen": "search_docs", "narrowed": i == 1,
                "served": served if i == 1 else offered}  # fmt: skip
        selection = {"step": i, "default_model": "gpt-5", "action": "continue",
                     "selected_model": selected if i == 1 else "gpt-5"}  # fmt: skip
        out += [
            {**base, "id": f"{run_id}-s{i}", "kind": "model_selection", "ts": at(10 * i),
             "data": selection},
            {**base, "id": f"{run_id}-p{i}", "kind": "tool_choice.pick", "ts": at(10 * i + 1),
             "data": pick},
        ]  # fmt: skip
    notice = {"code": "route.fallback_to_primary", "level": "warn", "message": "<b>x</b>",
              "detail": {"seat": "classifier", "from": "qwen3-8b", "to": "gpt-5",
                         "cause": "timeout"}}  # fmt: skip
    out.append({**base, "id": f"{run_id}-n", "kind": "notice", "ts": at(5), "data": notice})
    return out


@pytest.fixture
def site(live_server):
    now = timezone.now().replace(microsecond=0)
    acme = Project.objects.create(name="acme")

    def at(seconds: int) -> str:
        return (now - timedelta(minutes=20) + timedelta(seconds=seconds)).isoformat()

    store(acme, run_records("run-a", ["search_docs", "grep"], "gpt-5", at))
    store(acme, run_records("run-b", ["search_docs"], "claude-sonnet-4-5", at))
    store(acme, run_records("run-c", ["grep"], "gpt-5", at))
    catchup.catch_up()
    carol = get_user_model().objects.create_user("carol", password=PASSWORD)
    Membership.objects.create(user=carol, project=acme, role="admin")
    return {"url": live_server.url, "acme": acme}


def test_it_compares_two_runs_ticked_in_the_runs_list(page: Page, site, console: Console):
    log_in(page, site, console)
    page.click("nav.pages >> text=Runs")
    button = page.locator("button[data-compare]")
    expect(button).to_be_disabled()
    expect(button).to_contain_text("0 of 2")
    box = {
        run: page.locator(f'input[name=run][value="{run}"]') for run in ("run-a", "run-b", "run-c")
    }
    box["run-c"].check()
    box["run-a"].check()
    expect(button).to_be_enabled()
    box["run-b"].check()  # a third tick unticks the oldest
    expect(box["run-c"]).not_to_be_checked()
    expect(page.locator("input[name=run]:checked")).to_have_count(2)
    button.click()
    expect(page).to_have_url(re.compile(r"/compare/\?run=run-[ab]&run=run-[ab]$"))
    expect(page.locator("h1")).to_contain_text("Compare runs")
    expect(page.locator("th.run-a")).to_contain_text("run-")
    expect(page.locator("tbody.compare-step")).to_have_count(2)
    # Iteration 1 served and selected differently: those lanes are marked.
    expect(page.locator("tr.lane.diff")).to_have_count(2)
    expect(page.locator('tbody[data-iteration="1"] tr.diff[data-lane="served"]')).to_be_visible()
    expect(page.locator('tbody[data-iteration="0"].differs')).to_have_count(0)
    assert console.take() == []


def test_the_fallbacks_and_sessions_pages_draw_without_an_error(page: Page, site, console):
    log_in(page, site, console)
    page.click("nav.pages >> text=Fallbacks")
    expect(page.locator("h1")).to_contain_text("Fallbacks")
    for chart in ("chart-fallback-funnel", "chart-fallbacks-over-time"):
        expect(page.locator(f"#{chart} svg.main-svg").first).to_be_attached()
    expect(page.locator('tr[data-cause="route_fallback"] td.num')).to_have_text("3")
    page.select_option("select[name=period]", "24h")  # htmx swaps the charts in place
    expect(page).to_have_url(re.compile(r"period=24h"))
    expect(page.locator(".range")).to_contain_text("Last 24 hours")
    expect(page.locator("#chart-fallback-funnel svg.main-svg").first).to_be_attached()
    expect(page.locator("h1")).to_have_count(1)
    page.locator("a.chain").first.click()
    expect(page.locator("table.fallback-chain")).to_contain_text("<b>x</b>")  # as text
    page.click("nav.pages >> text=Sessions")
    expect(page.locator("tr.session-row")).to_have_count(1)
    page.click("tr.session-row a")
    expect(page.locator("td.run-id")).to_have_count(3)
    assert console.take() == []

"""The tools pages in a real browser: from the nav to the tools list, drill down into one tool
(a name that is markup), follow a run where it was missed; selection accuracy and the narrowing
what-if draw their charts. No page logs an error or runs the markup."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from playwright.sync_api import Page, expect

from records import catchup
from records.demo.generator import generate_records
from records.models import Membership, Project
from tests.browser.conftest import Console, screenshot
from tests.support.browser import PASSWORD, charts_drawn, store

pytestmark = pytest.mark.usefixtures("transactional_db")

EVIL_TOOL = '<img src=x onerror=alert("tool")>'


def missed_evil_tool(at) -> list[dict]:
    """A run whose classifier ranked the markup tool low and narrowed it out, and whose model
    then called it: a miss."""
    base = {"run_id": "evil-tools-run", "agent": "support-bot"}
    pick = {
        "iteration": 0,
        "source": "classifier",
        "classifier": {"name": "anthropic", "model": "claude-haiku-4-5"},
        "offered": ["search_docs", EVIL_TOOL, "grep"],
        "ranked": [{"name": "search_docs", "score": 0.7}, {"name": EVIL_TOOL, "score": 0.2}],
        "chosen": "search_docs",
        "confidence": 0.7,
        "latencyMs": 120.0,
        "served": ["search_docs", "read_skill"],
        "narrowed": True,
    }
    outcome = {"iteration": 0, "called": [EVIL_TOOL], "firstAgrees": False,
               "miss": {"wanted": [EVIL_TOOL]}}  # fmt: skip
    return [
        {**base, "id": "evil-t1", "kind": "tool_choice.pick", "ts": at(0), "data": pick},
        {**base, "id": "evil-t2", "kind": "tool_choice.outcome", "ts": at(2), "data": outcome},
    ]


@pytest.fixture
def site(live_server):
    now = timezone.now().replace(microsecond=0)
    acme = Project.objects.create(name="acme")
    store(acme, list(generate_records(records=1200, runs=12, seed=5, end=now - timedelta(minutes=2),
                                      span=timedelta(hours=5))))  # fmt: skip

    def at(seconds: int) -> str:
        return (now - timedelta(minutes=30) + timedelta(seconds=seconds)).isoformat()

    store(acme, missed_evil_tool(at))
    catchup.catch_up()
    dana = get_user_model().objects.create_user("dana", password=PASSWORD)
    Membership.objects.create(user=dana, project=acme, role="admin")
    return {"url": live_server.url, "acme": acme}


def test_it_drills_down_from_the_tools_list_into_a_tool_and_a_run_that_missed_it(
    page: Page, site, console: Console
):
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(site["url"] + "/tools/")
    page.fill("input[name=username]", "dana")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_contain_text("Tools")
    expect(page.locator("nav.pages a[aria-current=page]")).to_have_text("Tools")
    assert charts_drawn(page) == 2  # the funnel, the skip reasons
    table = page.locator("#tools-table")
    expect(table.locator("a.tool-link", has_text="search_docs")).to_be_visible()
    screenshot(page, "tools")
    # The markup tool is listed as text, in the tools and in the misses, and opens its page.
    link = table.locator("a.tool-link", has_text=EVIL_TOOL)
    expect(link).to_be_visible()
    expect(page.locator("#tools-missed", has_text=EVIL_TOOL)).to_be_visible()
    link.click()
    expect(page.locator("h1 .tool-name")).to_have_text(EVIL_TOOL)
    expect(page.locator("#tool-facts [data-stat=offered]")).to_have_text("1")
    expect(page.locator("#tool-facts [data-stat=missed]")).to_have_text("1")
    charts_drawn(page)
    expect(
        page.locator("#chart-tool-funnel .xtick", has_text=re.compile("offered"))
    ).to_be_attached()
    runs = page.locator("#tool-missed-runs a")
    expect(runs).to_have_count(1)
    screenshot(page, "tool")
    runs.first.click()
    expect(page.locator("h1")).to_contain_text("evil-tools-run")
    assert page.locator("img[src=x]").count() == 0
    assert dialogs == []
    assert console.take() == []


def test_it_draws_selection_accuracy_and_the_narrowing_what_if(page: Page, site, console):
    page.goto(site["url"] + "/selection/")
    page.fill("input[name=username]", "dana")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_contain_text("Selection accuracy")
    assert charts_drawn(page) == 5  # agreement and chosen, by model and agent; reliability
    expect(page.locator("#calibration tbody tr").first).to_contain_text("claude-haiku-4-5")
    page.click("nav.pages >> text=Narrowing")
    expect(page.locator("h1")).to_contain_text("Narrowing what-if")
    # The savings chart is drawn when some top-N's USD saving is estimated: whether the demo's
    # model calls of the period give a clear estimate depends on which calls fall in it.
    saved = page.locator("#whatif td.saved-usd").all_inner_texts()
    assert charts_drawn(page) == 3 + any(t.strip() != "not estimated" for t in saved)
    rows = page.locator("#whatif tbody tr")
    assert rows.count() >= 2
    # The miss rate never rises as N grows, and nothing is missed once N serves everything.
    rates = [float(t.strip().rstrip("%")) for t in page.locator("#whatif tbody tr td:nth-child(2)")
             .all_inner_texts()]  # fmt: skip
    assert rates == sorted(rates, reverse=True) and rates[-1] == 0
    assert console.take() == []

"""Releases in a real browser: a release's marker on the overview's time chart, the comparison
its link opens with the planted regression on top, and the runs behind that measure."""

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
from tests.support.browser import PASSWORD, charts_drawn, log_in, store
from tests.support.release_data import picks

pytestmark = pytest.mark.usefixtures("transactional_db")


@pytest.fixture
def site(live_server):
    now = timezone.now().replace(microsecond=0)
    acme = Project.objects.create(name="acme")
    store(acme, picks("v1", now - timedelta(hours=5), 1500, 30))
    # v2 starts 65 minutes ago: its marker lands in the right third of the six-hour chart, where
    # plotly.js's toolbar shows while the pointer is on the chart, whatever the time of day.
    store(acme, picks("v2", now - timedelta(minutes=65), 1500, 150))
    catchup.catch_up()
    carol = get_user_model().objects.create_user("carol", password=PASSWORD)
    Membership.objects.create(user=carol, project=acme, role="viewer")
    return {"url": live_server.url, "acme": acme}


def test_a_release_marker_leads_to_its_comparison_and_the_runs_behind_a_regression(
    page: Page, site, console: Console
):
    log_in(page, site, console)
    page.goto(f"{site['url']}/?agent=support-bot")
    assert charts_drawn(page) > 0
    marker = page.locator("g.annotation a", has_text="v2").first
    expect(marker).to_be_attached()
    # The name is turned a quarter (textangle -90), which Playwright's own click point does not
    # follow: the pointer goes where an operator would put it, on the middle of the name.
    marker.scroll_into_view_if_needed()
    box = marker.bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)

    expect(page).to_have_url(re.compile(r"/changes/\?marker=\d+$"))
    expect(page.locator('input[name="b"]')).to_have_value("release:v2")
    first = page.locator("table.changes tbody tr").first
    expect(first).to_contain_text("pick error rate")
    expect(first).to_contain_text("regression")
    expect(first.locator("td").nth(2)).to_contain_text("2.0")  # % of picks before
    expect(first.locator("td").nth(3)).to_contain_text("10.0")  # % of picks in v2

    first.get_by_role("link", name="B runs").click()
    expect(page).to_have_url(re.compile(r"/runs/\?.*release=v2"))
    expect(page).to_have_url(re.compile(r"has=error"))
    rows = page.locator("table tbody tr")
    expect(rows.first).to_contain_text("v2-support-bot-")
    assert console.take() == []

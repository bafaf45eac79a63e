"""Records stored for the browser tests and the browser's login and chart checks."""

from __future__ import annotations

import re

from django.utils import timezone
from playwright.sync_api import Page, expect

from records.contract.normalise import NormalisedRecord, normalise
from records.models import Project
from records.store.writer import store_records
from tests.browser.conftest import Console, screenshot

PASSWORD = "correct horse battery staple"


def log_in(page: Page, site: dict, console: Console) -> None:
    page.goto(site["url"] + "/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/$"))
    screenshot(page, "login")
    page.fill("input[name=username]", "carol")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_contain_text("Overview")
    assert console.take() == []


def store(project: Project, raw: list[dict]) -> None:
    now = timezone.now()
    records = [normalise(r, now=now) for r in raw]
    assert all(isinstance(r, NormalisedRecord) for r in records), records
    store_records(project.pk, records, now)


def charts_drawn(page: Page) -> int:
    """Wait for every chart div of the page to hold plotly's SVG; returns how many."""
    charts = page.locator("[data-chart]")
    for i in range(charts.count()):
        expect(charts.nth(i).locator("svg.main-svg").first).to_be_attached()
    return charts.count()

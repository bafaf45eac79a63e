"""Every page passes axe-core with no critical or serious finding, in Chromium, at a desktop and
a phone width.

axe-core comes from npm (tests/browser/package.json and its lock, installed with `npm ci`), and
is injected before each page's own scripts as an init script, which the page's
Content-Security-Policy does not govern.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from playwright.sync_api import Page, expect

from alerts.models import Rule
from records import catchup
from records.demo.generator import generate_records
from records.models import Membership, Project, Record, Run
from tests.support import node_packages
from tests.support.browser import PASSWORD, charts_drawn, store

pytestmark = pytest.mark.usefixtures("transactional_db")

HERE = Path(__file__).resolve().parent
AXE = HERE / "node_modules" / "axe-core" / "axe.min.js"
# The findings an operator who uses a screen reader or a keyboard cannot work around.
BLOCKING = ("critical", "serious")


@pytest.fixture(scope="module")
def axe() -> Path:
    """axe-core as the committed lock pins it, installed once."""
    node_packages.install(HERE)
    return AXE


@pytest.fixture
def operator_project(live_server) -> dict:
    """A project with demo runs, a rule and its operator, and one page path of every kind."""
    now = timezone.now().replace(microsecond=0)
    project = Project.objects.create(name="acme")
    records = generate_records(
        records=900, runs=10, seed=5, end=now - timedelta(minutes=3), span=timedelta(hours=3)
    )
    store(project, list(records))
    catchup.catch_up()
    user = get_user_model().objects.create_user("carol", password=PASSWORD)
    Membership.objects.create(user=user, project=project, role="admin")
    rule = Rule.objects.create(
        project=project, name="slow classifier", metric="classifier_latency_p95", threshold=800.0
    )
    run = (
        Run.objects.filter(project=project, kind_counts__has_key="tool_choice.pick")
        .order_by("-record_count")
        .first()
    )
    pick = Record.objects.filter(project=project, run_id=run.run_id, kind="tool_choice.pick")[0]
    tool = pick.data["ranked"][0]
    tool_name = tool["name"] if isinstance(tool, dict) else tool
    session = Run.objects.filter(project=project).exclude(session_id=None).first().session_id
    other = Run.objects.filter(project=project).exclude(run_id=run.run_id).first()
    paths = [
        "/", "/runs/", f"/runs/{run.run_id}/", f"/runs/{run.run_id}/picks/{pick.iteration}/",
        f"/compare/?runs={run.run_id}&runs={other.run_id}", "/models/", "/fallbacks/",
        f"/fallbacks/runs/{run.run_id}/", "/sessions/", f"/sessions/{session}/",
        "/classifiers/", "/streaks/", "/tools/", f"/tools/{tool_name}/", "/selection/",
        "/narrowing/", "/exports/", "/keys/", "/alerts/", "/alerts/new/", "/alerts/events/",
        f"/alerts/{rule.pk}/", "/alerts/channels/new/", "/project/",
        f"/changes/?a={now - timedelta(days=1):%Y-%m-%d}..{now:%Y-%m-%d}"
        f"&b={now:%Y-%m-%d}..{now + timedelta(days=1):%Y-%m-%d}",
    ]  # fmt: skip
    return {"url": live_server.url, "paths": paths}


def findings(page: Page) -> list[str]:
    """axe-core's blocking violations on the page as it is now, one line each."""
    violations = page.evaluate(
        "async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
    )
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes'][:3]]}"
        for v in violations
        if v["impact"] in BLOCKING
    ]


@pytest.mark.parametrize("width", [375, 1440])
def test_no_page_has_a_critical_or_serious_accessibility_finding(
    page: Page, axe, operator_project, width
):
    page.add_init_script(path=str(axe))
    page.set_viewport_size({"width": width, "height": 900})
    base = operator_project["url"]
    page.goto(base + "/accounts/login/")
    found = {"/accounts/login/": findings(page)}
    page.fill("input[name=username]", "carol")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_contain_text("Overview")
    for path in operator_project["paths"]:
        response = page.goto(base + path)
        assert response is not None and response.status == 200, path
        # goto waited for the load event, after which charts.js has drawn every figure; no
        # page fetches anything after it but its live poll.
        charts_drawn(page)
        found[path] = findings(page)
    failing = [f"{path}: {line}" for path, lines in found.items() for line in lines]
    assert failing == [], "\n".join(failing)

"""Deploy markers on the time charts: each release that began in a chart page's period is a
dashed line with its name, linking to the comparison with what ran before it; the page's agent
filter chooses which; names are shown as typed, never as markup; one query a page."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from records import catchup
from records.models import ReleaseMarker
from tests.support.factories import record
from tests.support.pages import figure, post

pytestmark = pytest.mark.both_dbs


def releases_drawn(fig: dict) -> list[tuple[str, str]]:
    """(name shown, link) of each release line's label."""
    return [
        (a["text"].split(">", 1)[1].rsplit("<", 1)[0], a["text"].split('"')[1])
        for a in fig["layout"].get("annotations", ())
        if a["text"].startswith("<a href=")
    ]


def dashed_lines(fig: dict) -> int:
    return sum(1 for s in fig["layout"].get("shapes", ()) if s["type"] == "line")


@pytest.fixture
def marked(alice):
    now = timezone.now()
    post(alice, [
        record("model_call", ts=(now - timedelta(minutes=40)).isoformat(), release="2026.12.1"),
        record("model_call", ts=(now - timedelta(minutes=20)).isoformat(), release="2026.12.1"),
        record("model_call", ts=(now - timedelta(minutes=5)).isoformat(), agent="router",
               release='<b>r&d</b> "7"'),
    ])  # fmt: skip
    catchup.catch_up()
    ReleaseMarker.objects.create(project=alice.project, agent="router", name="too-old",
                                 time=now - timedelta(days=40))  # fmt: skip
    return now


def test_each_release_of_the_period_is_a_line_linking_to_its_comparison(alice_page, marked):
    page = alice_page.get("/").content.decode()
    fig = figure(page, "chart-records")
    drawn = releases_drawn(fig)
    assert [name for name, _ in drawn] == ["2026.12.1", '&lt;b&gt;r&amp;d&lt;/b&gt; "7"']
    assert dashed_lines(fig) == 2
    # The link names the marker, never the release: plotly.js re-encodes an href's escapes.
    first, hostile = (ReleaseMarker.objects.get(name=n) for n in ("2026.12.1", '<b>r&d</b> "7"'))
    assert [link for _, link in drawn] == [
        f"/changes/?marker={first.pk}",
        f"/changes/?marker={hostile.pk}",
    ]
    # The comparison it opens is that release against what its agent ran before it.
    opened = alice_page.get("/changes/", {"marker": hostile.pk}).content.decode()
    assert 'name="b" value="release:&lt;b&gt;r&amp;d&lt;/b&gt; &quot;7&quot;"' in opened
    assert 'name="agent" value="router"' in opened
    assert 'name="a" value="before"' in opened
    # The line stands at the release's first record.
    assert first.source == "first record"


def test_the_agent_filter_chooses_the_releases_drawn(alice_page, marked):
    page = alice_page.get("/", {"agent": "router"}).content.decode()
    assert [name for name, _ in releases_drawn(figure(page, "chart-records"))] == [
        '&lt;b&gt;r&amp;d&lt;/b&gt; "7"'
    ]


def test_every_time_chart_of_a_page_draws_them_from_one_query(alice_page, marked):
    with CaptureQueriesContext(connection) as queries:
        page = alice_page.get("/").content.decode()
    reads = [q for q in queries.captured_queries if ReleaseMarker._meta.db_table in q["sql"]]
    assert len(reads) == 1
    charts = re.findall(r'<script id="(chart-[a-z-]+)-figure"', page)
    assert "chart-records" in charts
    for chart in charts:
        assert len(releases_drawn(figure(page, chart))) == 2, chart


@pytest.mark.parametrize("path", ["/classifiers/", "/models/", "/fallbacks/", "/selection/"])
def test_the_other_chart_pages_read_the_markers_too(alice_page, marked, path):
    with CaptureQueriesContext(connection) as queries:
        response = alice_page.get(path)
    assert response.status_code == 200
    reads = [q for q in queries.captured_queries if ReleaseMarker._meta.db_table in q["sql"]]
    assert len(reads) <= 1

"""The runs page filters by release as the runs API does, and its export link carries it."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from records import catchup
from tests.support.factories import record
from tests.support.pages import post

pytestmark = pytest.mark.both_dbs
RUN_LINK = r'<tr class="run-row">\s*<td class="run-id"><a href="/runs/([^/]+)/"'


def test_the_runs_page_shows_the_runs_of_a_release(alice, alice_page):
    ts = (timezone.now() - timedelta(minutes=10)).isoformat()
    post(
        alice,
        [
            record(run_id="before-1", ts=ts, release="agent 1.4.0"),
            record(run_id="before-2", ts=ts, release="agent 1.4.0"),
            record(run_id="after-1", ts=ts, release="agent 1.5.0"),
            record(run_id="unsaid", ts=ts),
        ],
    )
    catchup.catch_up()
    page = alice_page.get("/runs/", {"release": "agent 1.4.0"}).content.decode()
    assert set(re.findall(RUN_LINK, page)) == {"before-1", "before-2"}
    assert 'name="release" value="agent 1.4.0"' in page
    assert 'href="/exports/?project=acme&amp;release=agent+1.4.0"' in page
    everything = alice_page.get("/runs/").content.decode()
    assert set(re.findall(RUN_LINK, everything)) == {"before-1", "before-2", "after-1", "unsaid"}

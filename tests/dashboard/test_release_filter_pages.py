"""The rollup pages take `release` beside `agent`: the overview, models, classifiers, tools and
fallbacks pages read the rows of those releases only, and every release without it."""

from __future__ import annotations

import pytest

from tests.support.release_data import DAY_1, picks, post_all

RANGE = {"from": "2026-11-02T00:00", "to": "2026-11-03T00:00"}


def kpi(response, name: str):
    assert response.status_code == 200
    (found,) = [k for k in response.context["data"]["kpis"] if k.name == name]
    return found


def test_the_overview_counts_the_release_asked_for_and_every_release_without_one(alice, alice_page):
    post_all(alice.client(), picks("v1", DAY_1, 300, 30) + picks("v2", DAY_1, 200, 2))
    both = kpi(alice_page.get("/", RANGE), "pick_error_rate")
    v1 = kpi(alice_page.get("/", {**RANGE, "release": "v1"}), "pick_error_rate")
    v2 = kpi(alice_page.get("/", {**RANGE, "release": "v2"}), "pick_error_rate")
    assert (v1.value, v1.count) == (pytest.approx(0.1), 300)
    assert (v2.value, v2.count) == (pytest.approx(0.01), 200)
    assert (both.value, both.count) == (pytest.approx(32 / 500), 500)


@pytest.mark.parametrize("path", ["/models/", "/classifiers/", "/tools/", "/selection/",
                                  "/narrowing/", "/fallbacks/"])  # fmt: skip
def test_each_rollup_page_offers_the_release_filter_and_keeps_it(alice_page, path):
    response = alice_page.get(path, {**RANGE, "release": "v1"})
    assert response.status_code == 200
    assert 'name="release" value="v1"' in response.content.decode()

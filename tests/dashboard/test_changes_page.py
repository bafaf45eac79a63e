"""The changes page (/changes/): the rows the API gives, regressions first, each linked to the
runs behind both sides; a side it cannot read is said on the page, not a 500."""

from __future__ import annotations

import pytest

from tests.support.release_data import DAY_1, DAY_2, picks, post_all


def test_it_shows_the_planted_regression_first_with_its_runs(alice, alice_page):
    post_all(alice.client(), picks("v1", DAY_1, 2000, 80) + picks("v2", DAY_2, 2000, 160))
    response = alice_page.get(
        "/changes/", {"agent": "support-bot", "a": "release:v1", "b": "release:v2"}
    )
    assert response.status_code == 200
    page = response.content.decode()
    first = page.index('<tr class="verdict-regression">')
    assert page.index("pick error rate", first) < page.index("</tr>", first)
    assert "4.00 %" in page and "8.00 %" in page and "+4.00 pp" in page
    assert "/runs/?project=acme&amp;agent=support-bot&amp;release=v2&amp;has=error" in page
    assert page.count('class="verdict-regression"') == 1


def test_a_side_it_cannot_read_is_named_on_the_page(alice_page):
    response = alice_page.get("/changes/", {"a": "release:", "b": "release:v2"})
    assert response.status_code == 200
    assert "a: names no release: release:&lt;name&gt;" in response.content.decode()


def test_without_sides_it_is_the_form(alice_page):
    response = alice_page.get("/changes/")
    assert response.status_code == 200
    assert 'name="a"' in response.content.decode()


@pytest.mark.parametrize("marker", ["999999", "x1", "²", "9" * 40])
def test_a_marker_that_is_not_the_projects_is_said_not_found(alice_page, marker):
    response = alice_page.get("/changes/", {"marker": marker})
    assert response.status_code == 200
    assert "no release marker of this project has that id" in response.content.decode()

"""GET /api/v1/changes: two releases (or a release and the weeks before it, or two windows) of
one agent compared measure by measure from the rollups, with the statistics scipy and
statsmodels compute from the same counts."""

from __future__ import annotations

from datetime import timedelta

import pytest
from scipy import stats
from statsmodels.stats.proportion import confint_proportions_2indep

from records.metrics import change_stats
from tests.support.release_data import DAY_1, DAY_2, ladders, picks, post_all


def changes(persona, **params):
    response = persona.client(persona.read_key).get("/api/v1/changes", params)
    assert response.status_code == 200, response.content
    return response.json()


def row(body: dict, measure: str, group: dict | None = None) -> dict:
    group = group or {}
    (found,) = [m for m in body["measures"] if m["measure"] == measure and m["group"] == group]
    return found


def test_it_flags_a_planted_pick_error_regression_first_with_scipys_figures(alice):
    post_all(alice.client(), picks("v1", DAY_1, 2000, 80) + picks("v2", DAY_2, 2000, 160))
    body = changes(alice, agent="support-bot", a="release:v1", b="release:v2")
    first = body["measures"][0]
    assert (first["measure"], first["verdict"]) == ("pick_error_rate", "regression")
    assert [m["measure"] for m in body["measures"] if m["verdict"] != "no evidence"] == [
        "pick_error_rate"
    ]
    assert (first["a"]["value"], first["b"]["value"]) == (0.04, 0.08)
    assert (first["a"]["n"], first["b"]["n"]) == (2000, 2000)
    assert first["change"] == pytest.approx(0.04)
    # The same counts through scipy: the pooled z-test is the uncorrected chi-squared test.
    table = [[80, 1920], [160, 1840]]
    assert first["p_value"] == pytest.approx(
        stats.chi2_contingency(table, correction=False)[1], rel=1e-6
    )
    low, high = confint_proportions_2indep(160, 2000, 80, 2000, method="newcomb", compare="diff")
    assert first["interval"] == pytest.approx([low, high], abs=1e-6)
    tested = [m["p_value"] for m in body["measures"] if m["p_value"] is not None]
    assert first["q_value"] == pytest.approx(
        stats.false_discovery_control(tested, method="bh").min(), rel=1e-9
    )
    assert first["a"]["runs"] == "/runs/?agent=support-bot&release=v1&has=error"
    assert first["b"]["runs"] == "/runs/?agent=support-bot&release=v2&has=error"


def test_two_equal_releases_flag_nothing(alice):
    post_all(alice.client(), picks("v1", DAY_1, 2000, 80) + picks("v2", DAY_2, 2000, 80))
    body = changes(alice, agent="support-bot", a="release:v1", b="release:v2")
    assert {m["verdict"] for m in body["measures"]} == {"no evidence"}
    assert row(body, "pick_error_rate")["p_value"] == pytest.approx(1.0)


def test_a_release_against_the_weeks_before_it_reads_every_release_then(alice):
    post_all(alice.client(), picks("v1", DAY_1, 2000, 80) + picks("v2", DAY_2, 2000, 160)
             + picks("v0", DAY_1 - timedelta(days=1), 500, 20))  # fmt: skip
    body = changes(alice, agent="support-bot", a="before", b="release:v2", weeks="2")
    first = row(body, "pick_error_rate")
    assert (first["a"]["n"], first["b"]["n"]) == (2500, 2000)
    assert first["verdict"] == "regression"
    assert body["a"]["to"] == "2026-11-09T09:00:00Z"


def test_two_windows_compare_by_time(alice):
    post_all(alice.client(), picks("v1", DAY_1, 2000, 80) + picks("v2", DAY_2, 2000, 160))
    body = changes(alice, a="2026-11-01..2026-11-08", b="2026-11-08..2026-11-15")
    assert row(body, "pick_error_rate")["verdict"] == "regression"
    assert body["b"]["runs"] == "/runs/?from=2026-11-08T00%3A00%3A00Z&to=2026-11-15T00%3A00%3A00Z"


def test_ladder_fallbacks_compare_by_cause(alice):
    post_all(
        alice.client(), ladders("v1", DAY_1, 1000, 20, 20) + ladders("v2", DAY_2, 1000, 80, 20)
    )
    body = changes(alice, agent="support-bot", a="release:v1", b="release:v2")
    whole = row(body, "ladder_fallback_rate")
    assert (whole["a"]["value"], whole["b"]["value"], whole["verdict"]) == (0.04, 0.1, "regression")
    timeouts = row(body, "ladder_fallback_rate", {"cause": "timeout"})
    assert (timeouts["a"]["value"], timeouts["b"]["value"]) == (0.02, 0.08)
    assert (timeouts["a"]["n"], timeouts["b"]["n"]) == (1000, 1000)
    assert timeouts["verdict"] == "regression"
    assert timeouts["p_value"] == pytest.approx(
        stats.chi2_contingency([[20, 980], [80, 920]], correction=False)[1], rel=1e-6
    )
    parse_errors = row(body, "ladder_fallback_rate", {"cause": "parse_error"})
    assert (parse_errors["a"]["value"], parse_errors["b"]["value"]) == (0.02, 0.02)
    assert parse_errors["verdict"] == "no evidence"
    causes = {
        m["group"].get("cause") for m in body["measures"] if m["measure"] == "ladder_fallback_rate"
    }
    assert causes == {None, "timeout", "parse_error"}


def test_a_side_with_too_few_picks_says_how_many_more_it_needs(alice):
    post_all(alice.client(), picks("v1", DAY_1, 50, 2) + picks("v2", DAY_2, 50, 4))
    first = row(changes(alice, a="release:v1", b="release:v2"), "pick_error_rate")
    assert first["verdict"] == "no evidence"
    needed = change_stats.sample_size_needed(0.04, 0.08)
    assert (first["needed_per_side"], first["more_needed"]) == (needed, needed - 50)


def test_another_agent_or_project_is_not_read(alice, bob):
    post_all(alice.client(), picks("v1", DAY_1, 200, 8) + picks("v2", DAY_2, 200, 16, "other"))
    body = changes(alice, agent="support-bot", a="release:v1", b="release:v2")
    assert row(body, "pick_error_rate")["b"]["n"] == 0
    assert row(changes(bob, a="release:v1", b="release:v2"), "pick_error_rate")["a"]["n"] == 0


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({"b": "release:v2"}, {"a": ["is required: release:<name>, before, or <from>..<to>"]}),
        ({"a": "v1", "b": "release:v2"},
         {"a": ["'v1' is none of release:<name>, before, <from>..<to>"]}),
        ({"a": "before", "b": "2026-11-01..2026-11-02"},
         {"a": ["'before' needs the other side to be a release"]}),
        ({"a": "before", "b": "release:nothing"},
         {"a": ["release 'nothing' has no records to be before"]}),
        ({"a": "2026-11-08..2026-11-01", "b": "release:v2"}, {"a": ["ends before it starts"]}),
        ({"a": "2026-13-01..2026-11-01", "b": "release:v2"},
         {"a": ["'2026-13-01' is not a date (YYYY-MM-DD)"]}),
    ],
)  # fmt: skip
def test_a_side_it_cannot_read_is_a_400_naming_it(alice, params, error):
    response = alice.client(alice.read_key).get("/api/v1/changes", params)
    assert response.status_code == 400
    assert response.json() == error

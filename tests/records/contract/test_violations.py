"""Broken contracts: stored and flagged, never rejected; found by `has=violation` on
records and runs, shown on the run and pick pages, and alertable."""

from __future__ import annotations

import pytest
from django.utils import timezone

from alerts.engine import evaluate_all
from alerts.models import AlertState
from records import catchup
from tests.support.alert_flow import ALERT_RULE, all_key
from tests.support.factories import record

pytestmark = pytest.mark.both_dbs


def _notice(id_, run_id, ts):
    data = {
        "code": "classifier.role_defaulted",
        "message": "defaulted",
        "detail": {"reason": "tier_below_main", "model": "qwen3-8b"},
    }
    return record("notice", id=id_, run_id=run_id, ts=ts, data=data)


@pytest.fixture
def broken(alice):
    now = timezone.now().replace(microsecond=0)
    ts = now.isoformat()
    good = record("tool_choice.pick", id="good", run_id="run-ok", ts=ts)
    bad = record(
        "tool_choice.pick", id="bad", run_id="run-bad", ts=ts, data={"chosen": "send_email"}
    )
    first = _notice("n1", "run-bad", ts)
    client = alice.client()
    response = client.post("/api/v1/records", {"records": [good, bad, first]}, format="json")
    assert response.json() == {"accepted": 3, "duplicates": 0, "rejected": []}
    catchup.catch_up()
    # The same once-per-run notice again, in a later batch: the catch-up pass flags it.
    again = _notice("n2", "run-bad", (now.replace(second=0)).isoformat())
    assert client.post("/api/v1/records", again, format="json").status_code == 200
    catchup.catch_up()
    return alice


def test_a_broken_contract_is_stored_flagged_and_found(broken):
    reader = broken.client(broken.read_key)
    found = reader.get("/api/v1/records", {"has": "violation"}).json()["results"]
    assert {r["id"]: r["derived"]["violations"] for r in found} == {
        "bad": ["chosen_not_offered"],
        "n2": ["notice_repeated_in_run"],
    }
    runs = reader.get("/api/v1/runs", {"has": "violation"}).json()["results"]
    assert [r["run_id"] for r in runs] == ["run-bad"]
    assert runs[0]["has"]["violation"] is True
    rates = reader.get(
        "/api/v1/metrics/violation_rate",
        {"interval": "day", "group_by": "code"},
    ).json()["totals"]
    by_code = {t["group"]["code"]: (t["value"], t["count"]) for t in rates}
    assert by_code["chosen_not_offered"] == (0.25, 4)
    assert by_code["notice_repeated_in_run"] == (0.25, 4)
    assert by_code["ranked_repeated"] == (0.0, 4)


def test_the_run_and_pick_pages_show_the_broken_contract(broken, alice_page):  # noqa: F811
    run = alice_page.get("/runs/run-bad/").content.decode()
    assert "broken contract" in run and "chosen_not_offered" in run
    assert "notice_repeated_in_run" in run
    pick = alice_page.get("/runs/run-bad/picks/0/").content.decode()
    assert "Broken contract" in pick and "chosen_not_offered" in pick
    clean = alice_page.get("/runs/run-ok/picks/0/").content.decode()
    assert "Broken contract" not in clean


def test_a_rule_fires_on_violations(broken):
    rule = {**ALERT_RULE, "metric": "violation_rate", "threshold": 0.2, "min_records": 1}
    rule.update(for_minutes=0, warning_threshold=None, group_by="", window_minutes=60)
    response = all_key(broken).post("/api/v1/alert-rules", rule, format="json")
    assert response.status_code == 201, response.content
    evaluate_all()
    state = AlertState.objects.get(rule_id=response.json()["id"])
    assert state.state == "firing" and state.value == pytest.approx(0.5)


def test_a_replay_counts_a_repeated_notice_once(broken):
    """The catch-up flags a repeated once-per-run notice in the record itself; folding the
    records in again (a rebuild of the rollups over records already flagged) counts it once."""
    from records.models import Rollup
    from tests.support.rollup_data import forget_rollups

    def violation_rows():
        return sorted(
            Rollup.objects.filter(project=broken.project, kind="derived.violation").values_list(
                "grain", "bucket", "agent", "model", "key", "count"
            )
        )

    once = violation_rows()
    assert once  # the pick's and the repeated notice's
    forget_rollups(broken.project)
    catchup.catch_up()
    assert violation_rows() == once

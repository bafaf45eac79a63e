"""Rates in per cent wherever an operator reads or types them (alerts.units); fractions in the
API and the database."""

from __future__ import annotations

import re

from alerts import units
from alerts.models import Rule
from alerts.transports import email_message
from tests.support.alert_flow import make_rule


def test_a_rate_is_typed_and_read_in_per_cent_and_stored_as_a_fraction():
    assert units.from_form("pick_error_rate", 10) == 0.1
    assert units.to_form("pick_error_rate", 0.1) == 10
    assert units.display("pick_error_rate", 0.1667) == "16.7 %"
    assert units.threshold("swap_rate", 0.05) == "5 %"
    # Other families keep their numbers and say their unit.
    assert units.from_form("classifier_latency_p95", 800) == 800
    assert units.display("classifier_latency_p95", 1234.5) == "1,234 ms"
    assert units.threshold("contract_broken_streak", 3) == "3 in a row"
    assert units.display("records", None) == "no data"


def test_a_rule_describes_itself_and_emails_in_per_cent(alice):
    rule = make_rule(alice, metric="pick_error_rate", threshold=0.1, comparator="gt")
    assert rule.describe() == "pick error rate > 10 % over 5 min by model"
    subject, text = email_message(
        {"rule": {"name": rule.name, "metric": rule.metric, "condition": rule.describe()},
         "project": "acme", "group": "qwen3-8b", "state": "firing", "previous_state": "ok",
         "value": 0.1667, "count": 12, "threshold": 0.1, "window_minutes": 5,
         "at": "2026-12-01T10:00:00+00:00", "url": "http://x/alerts/1/"}
    )  # fmt: skip
    assert "Value: 16.7 % over 5 min (12 records)" in text
    assert "Threshold: 10 %" in text


def test_the_rule_form_takes_10_as_10_percent(alice, alice_page):  # noqa: F811
    form = {
        "project": "acme", "name": "errors", "metric": "pick_error_rate", "comparator": "gte",
        "threshold": "10", "warning_threshold": "5", "window_minutes": "5", "min_records": "1",
        "for_minutes": "0", "no_data": "ok", "renotify_minutes": "0", "match": "{}",
        "save": "1",
    }  # fmt: skip
    response = alice_page.post("/alerts/new/", form)
    assert response.status_code == 302, response.content.decode()[-2000:]
    rule = Rule.objects.get(name="errors")
    assert (rule.threshold, rule.warning_threshold) == (0.1, 0.05)
    page = alice_page.get(f"/alerts/{rule.pk}/").content.decode()
    assert re.search(r'name="threshold" value="10(\.0)?"', page)
    assert '<span class="unit" data-unit>%</span>' in page
    # Out of range for a percentage: said so, nothing saved.
    response = alice_page.post("/alerts/new/", {**form, "name": "bad", "threshold": "150"})
    assert "a rate is between 0 and 100 (per cent)" in response.content.decode()
    assert not Rule.objects.filter(name="bad").exists()


def test_a_new_rule_starts_on_the_current_project(alice, alice_page):  # noqa: F811
    page = alice_page.get("/alerts/new/").content.decode()
    assert re.search(r'<option value="acme" selected>acme</option>', page)

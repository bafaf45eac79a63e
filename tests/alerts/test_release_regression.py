"""Release regression rules: each agent's newest release compared with the one before it, a
measure that got worse firing once with both values, its interval and the comparison's link."""

from __future__ import annotations

from datetime import timedelta

import pytest
from statsmodels.stats.proportion import confint_proportions_2indep

from alerts import delivery, engine, preview, transports
from alerts.models import AlertEvent, Channel, Notification, Rule, rule_errors
from tests.support.release_data import DAY_1, DAY_2, picks, post_all

NOW = DAY_2 + timedelta(days=1)


def regression_rule(persona, **fields) -> Rule:
    defaults = {
        "name": "release regressions",
        "metric": "release_regression",
        "agent": "support-bot",
        "comparator": "lte",
        "threshold": 0.05,
        "min_records": 1000,
    }
    return Rule.objects.create(project=persona.project, **{**defaults, **fields})


def queued(now=NOW) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    engine.evaluate_all(now=now, enqueue=lambda event, channel: out.append((event, channel)))
    return out


def test_a_planted_pick_error_regression_fires_once_naming_the_measure_and_both_values(alice):
    post_all(alice.client(), picks("v1", DAY_1, 1000, 20) + picks("v2", DAY_2, 1000, 80))
    rule = regression_rule(alice)
    channel = Channel.objects.create(
        project=alice.project, name="hook", kind="webhook", url="https://hooks.example.com/x"
    )
    rule.channels.add(channel)

    first = queued()
    (event,) = AlertEvent.objects.filter(rule=rule)
    assert [(e, c) for e, c in first] == [(event.pk, channel.pk)]
    assert (event.to_state, event.group) == ("firing", "support-bot v2: pick error rate")
    detail = event.detail
    assert (detail["release"], detail["previous_release"]) == ("v2", "v1")
    assert (detail["value_before"], detail["value_after"]) == (0.02, 0.08)
    assert (detail["observations_before"], detail["observations_after"]) == (1000, 1000)
    low, high = confint_proportions_2indep(80, 1000, 20, 1000, method="newcomb", compare="diff")
    assert detail["interval"] == pytest.approx([low, high], abs=1e-6)
    assert event.value == detail["q_value"] < 0.05
    assert detail["url"].endswith("/changes/?agent=support-bot&a=release%3Av1&b=release%3Av2")

    payload = delivery.event_payload(event)
    assert payload["detail"] == detail and payload["group"] == event.group
    subject, text = transports.email_message(payload)
    assert "pick error rate" in subject
    assert "Before: 2.00 % in release v1 (1,000 picks)" in text
    assert "After: 8.00 % in release v2 (1,000 picks)" in text
    assert f"95 % interval {low * 100:+.2f} points to {high * 100:+.2f} points" in text
    assert "over 5 min" not in text

    # Once: later ticks keep the group firing without a second notification.
    assert queued(NOW + timedelta(minutes=1)) == []
    assert queued(NOW + timedelta(minutes=2)) == []
    assert AlertEvent.objects.filter(rule=rule).count() == 1
    assert Notification.objects.filter(event__rule=rule).count() == 1


def test_two_equal_releases_fire_nothing(alice):
    post_all(alice.client(), picks("v1", DAY_1, 1000, 20) + picks("v2", DAY_2, 1000, 20))
    rule = regression_rule(alice)
    queued()
    assert not AlertEvent.objects.filter(rule=rule).exists()
    rule.refresh_from_db()
    assert rule.last_error == "" and rule.last_evaluated_at is not None


def test_a_release_with_fewer_runs_than_the_rule_asks_is_not_judged_yet(alice):
    post_all(alice.client(), picks("v1", DAY_1, 1000, 20) + picks("v2", DAY_2, 600, 48))
    rule = regression_rule(alice, min_records=1000)
    queued()
    assert not AlertEvent.objects.filter(rule=rule).exists()
    rule.min_records = 500
    rule.save()
    queued(NOW + timedelta(minutes=1))
    assert AlertEvent.objects.filter(rule=rule, to_state="firing").count() == 1


def test_the_newest_release_is_compared_with_the_one_just_before_it(alice):
    """A third release that undoes the regression resolves the second's group."""
    post_all(alice.client(), picks("v1", DAY_1, 1000, 20) + picks("v2", DAY_2, 1000, 80))
    rule = regression_rule(alice)
    queued()
    post_all(alice.client(), picks("v3", DAY_2 + timedelta(days=2), 1000, 75))
    queued(NOW + timedelta(days=3))
    transitions = list(
        AlertEvent.objects.filter(rule=rule).order_by("id").values_list("group", "to_state")
    )
    assert transitions == [
        ("support-bot v2: pick error rate", "firing"),
        ("support-bot v2: pick error rate", "ok"),
    ]


def test_every_agent_is_watched_when_the_rule_names_none(alice):
    post_all(
        alice.client(),
        picks("v1", DAY_1, 1000, 20)
        + picks("v2", DAY_2, 1000, 20)
        + picks("r1", DAY_1, 1000, 20, agent="billing-bot")
        + picks("r2", DAY_2, 1000, 80, agent="billing-bot"),
    )
    rule = regression_rule(alice, agent="")
    queued()
    assert list(AlertEvent.objects.filter(rule=rule).values_list("group", flat=True)) == [
        "billing-bot r2: pick error rate"
    ]


def test_the_preview_shows_what_the_rule_finds_now(alice):
    post_all(alice.client(), picks("v1", DAY_1, 1000, 20) + picks("v2", DAY_2, 1000, 80))
    shown = preview.preview_rule(regression_rule(alice), now=NOW)
    assert [line.label for line in shown.lines] == ["support-bot v2: pick error rate"]
    assert [g for _, g, _ in shown.fired] == ["support-bot v2: pick error rate"]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"comparator": "gt"}, "comparator"),
        ({"threshold": 5.0}, "threshold"),
        ({"warning_threshold": 1.5}, "warning_threshold"),
        ({"model": "gpt-4o"}, "model"),
        ({"group_by": "model"}, "group_by"),
        ({"match": {"verdict": "block"}}, "match"),
    ],
)
def test_a_release_regression_rule_takes_a_q_value_and_no_filter_but_the_agent(fields, field):
    base = {"metric": "release_regression", "comparator": "lte", "threshold": 0.05}
    assert rule_errors(**base) == {}
    assert field in rule_errors(**{**base, **fields})

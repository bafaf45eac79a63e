"""Rules on every metric family, driven the way production drives them.

Records are posted through POST /api/v1/records, folded by the workers' catch-up pass
(records.catchup.passes.catch_up) and evaluated by the engine's tick at a chosen `now`. Each rule
fires while its records come in and resolves once they stop.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from alerts.models import AlertEvent, Channel, Notification, Rule
from records import catchup
from tests.support.alert_flow import T, events, post_rolled_up, states, tick, ts
from tests.support.factories import record

pytestmark = pytest.mark.both_dbs


def pick(i, model, latency=120.0, **data):
    return record(
        "tool_choice.pick",
        ts=ts(1, i),
        data={"classifier": {"name": "c", "model": model}, "latencyMs": latency, **data},
    )


def verdict(i, minutes=1, **data):
    return record("classifier.verdict", ts=ts(minutes, i), data=data)


# Each case: the rule, records that breach it (with neighbours that must stay ok or that its
# filters must leave out), the group that fires ("" for an ungrouped rule) and its value.
CASES = {
    "classifier latency": (
        {"metric": "classifier_latency_p95", "group_by": "model", "threshold": 1000},
        lambda: (
            [pick(i, "qwen3-8b", 2500.0) for i in range(20)]
            + [pick(i, "claude-haiku-4-5", 90.0) for i in range(20, 40)]
        ),
        "qwen3-8b",
        2500.0,
    ),
    "pick error rate": (
        {"metric": "pick_error_rate", "group_by": "model", "threshold": 0.2, "min_records": 10},
        lambda: (
            [pick(i, "qwen3-8b") for i in range(10)]
            + [
                record(
                    "tool_choice.pick_error",
                    ts=ts(1, 100 + i),
                    data={"classifier": {"name": "c", "model": "qwen3-8b"}},
                )
                for i in range(10)
            ]
            + [pick(200 + i, "claude-haiku-4-5") for i in range(20)]
        ),
        "qwen3-8b",
        0.5,
    ),
    "narrowing skip rate": (
        {
            "metric": "narrowing_skip_rate",
            "threshold": 0.5,
            "match": {"reason": "unavailable"},
        },
        lambda: (
            [pick(i, "qwen3-8b", narrowed=False, narrowedSkipped="unavailable") for i in range(8)]
            + [pick(10 + i, "qwen3-8b") for i in range(2)]
        ),
        "",
        0.8,
    ),
    "first-pick agreement": (
        {"metric": "first_pick_agreement", "comparator": "lt", "threshold": 0.5},
        lambda: [
            record("tool_choice.outcome", ts=ts(1, i), data={"firstAgrees": i == 0})
            for i in range(10)
        ],
        "",
        0.1,
    ),
    "swap rate": (
        {"metric": "swap_rate", "group_by": "model", "threshold": 0.5},
        lambda: (
            [
                record(
                    "model_selection",
                    ts=ts(1, i),
                    data={"default_model": "gpt-5", "selected_model": "gpt-5-mini"},
                )
                for i in range(6)
            ]
            + [record("model_selection", ts=ts(1, 10 + i)) for i in range(6)]
        ),
        "gpt-5",
        1.0,
    ),
    "ladder fallback rate": (
        {"metric": "ladder_fallback_rate", "group_by": "model", "threshold": 0.3},
        lambda: (
            [verdict(i) for i in range(4)]
            + [verdict(10 + i, rung=1, model="claude-sonnet-4-5") for i in range(4)]
        ),
        "qwen3-8b",
        1.0,
    ),
    "verdict mix": (
        {"metric": "verdicts", "match": {"verdict": "block"}, "threshold": 4, "agent": "bot-b"},
        lambda: (
            [verdict(i, verdict="block") for i in range(5)]  # agent support-bot
            + [
                record(
                    "classifier.verdict", ts=ts(1, 10 + i), agent="bot-b", data={"verdict": "block"}
                )
                for i in range(5)
            ]
        ),
        "",
        5,
    ),
    "provider errors": (
        {"metric": "provider_errors", "match": {"provider": "anthropic"}, "threshold": 2},
        lambda: [record("provider.error", ts=ts(1, i)) for i in range(3)],
        "",
        3,
    ),
    "turn health": (
        {"metric": "invented_tool_rate", "group_by": "agent", "threshold": 0.5},
        lambda: [
            record(
                "turn",
                ts=ts(1, i),
                data={"toolCalls": [{"name": "refund_now"}], "toolNameMap": {"x": "y"}},
            )
            for i in range(4)
        ],
        "support-bot",
        1.0,
    ),
    "model call latency": (
        {"metric": "model_call_latency_p95", "group_by": "model", "threshold": 5000},
        lambda: (
            [
                record("model_call", ts=ts(1, i), data={"model": "gpt-5", "durationMs": 9000.0})
                for i in range(5)
            ]
            + [record("model_call", ts=ts(1, 10 + i)) for i in range(5)]
        ),
        "gpt-5",
        9000.0,
    ),
    "model call tokens": (
        {"metric": "model_call_tokens", "threshold": 20000},
        lambda: [record("model_call", ts=ts(1, i)) for i in range(5)],  # 5,300 tokens each
        "",
        26500,
    ),
    "records": (
        {"metric": "records", "kind": "notice", "threshold": 3},
        lambda: (
            [record("notice", ts=ts(1, i)) for i in range(4)]
            + [record("turn", ts=ts(1, 10 + i)) for i in range(10)]
        ),
        "",
        4,
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_a_rule_fires_on_posted_records_and_resolves_when_they_stop(alice, case):
    fields, make_records, group, value = CASES[case]
    rule = Rule.objects.create(
        project=alice.project, name=case, window_minutes=5, **{"comparator": "gt", **fields}
    )
    assert tick(0).events == 0  # nothing posted yet: ok (no data counts as ok)

    post_rolled_up(alice, make_records())
    tick(3)
    assert {g: s for g, s in states(rule).items() if s != "ok"} == {group: "firing"}
    assert events(rule) == [(group, "ok", "firing", True)]
    fired = AlertEvent.objects.get(rule=rule)
    assert fired.value == pytest.approx(value, rel=0.01) and fired.threshold == fields["threshold"]
    assert fired.window_minutes == 5

    tick(30)  # the records stopped: the window is empty
    assert events(rule)[-1] == (group, "firing", "ok", True)
    assert "firing" not in states(rule).values()


def test_a_contract_broken_streak_fires_and_resolves_on_the_next_ruling(alice):
    rule = Rule.objects.create(
        project=alice.project,
        name="contract",
        metric="contract_broken_streak",
        group_by="model",
        comparator="gte",
        threshold=3,
    )
    broken = {"outcome": "parse_error", "verdict": None, "form": "missing"}
    post_rolled_up(alice, [verdict(i, **broken) for i in range(3)])
    post_rolled_up(alice, [verdict(10 + i, model="gpt-5-mini", **broken) for i in range(2)])
    tick(3)
    assert states(rule) == {"qwen3-8b": "firing"}  # gpt-5-mini, at 2, is ok: no row
    assert AlertEvent.objects.get(rule=rule).value == 3

    tick(30)  # a streak is not a window: silence does not end it
    assert states(rule)["qwen3-8b"] == "firing"
    post_rolled_up(alice, [verdict(0, minutes=31)])  # a ruling resets it
    tick(32)
    assert events(rule)[-1] == ("qwen3-8b", "firing", "ok", True)
    assert states(rule) == {}


def test_a_rule_with_a_for_duration_fires_only_once_the_condition_held(alice):
    rule = Rule.objects.create(
        project=alice.project,
        name="slow",
        metric="classifier_latency_p95",
        threshold=1000,
        window_minutes=10,
        for_minutes=2,
    )
    post_rolled_up(alice, [pick(i, "qwen3-8b", 2500.0) for i in range(10)])
    tick(2)
    tick(3)
    assert states(rule) == {"": "pending"}
    tick(4)
    assert states(rule) == {"": "firing"}
    assert [e[1:] for e in events(rule)] == [("ok", "pending", False), ("pending", "firing", True)]


def test_notifications_go_to_the_rules_channels_unless_silenced(alice):
    channel = Channel.objects.create(
        project=alice.project, name="oncall", kind="email", addresses=["o@example.com"]
    )
    loud = Rule.objects.create(
        project=alice.project, name="loud", metric="provider_errors", threshold=0
    )
    quiet = Rule.objects.create(
        project=alice.project,
        name="quiet",
        metric="provider_errors",
        threshold=0,
        silenced_until=T + timedelta(hours=1),
    )
    for rule in (loud, quiet):
        rule.channels.add(channel)
    post_rolled_up(alice, [record("provider.error", ts=ts(1))])
    queued = []
    tick(2, enqueue=lambda event_id, channel_id: queued.append((event_id, channel_id)))
    fired = AlertEvent.objects.get(rule=loud)
    assert queued == [(fired.pk, channel.pk)]
    assert Notification.objects.get().status == "queued"
    muted = AlertEvent.objects.get(rule=quiet)
    assert muted.silenced and not muted.notify


def test_a_broken_rule_is_reported_and_never_stops_the_others(alice, bob):
    post_rolled_up(alice, [record("provider.error", ts=ts(1))])
    post_rolled_up(bob, [record("provider.error", ts=ts(1, 1))])
    # Saved behind validation's back (the admin, an old version): each fails its own way.
    unknown = Rule.objects.create(project=alice.project, name="gone", metric="x", threshold=1)
    bad_match = Rule.objects.create(
        project=alice.project, name="bad", metric="verdicts", match=["block"], threshold=1
    )
    good = [
        Rule.objects.create(project=p.project, name="ok", metric="provider_errors", threshold=0)
        for p in (alice, bob)
    ]
    result = tick(2)
    assert result.rules == 4 and result.errors == 2
    for rule in good:
        assert states(rule) == {"": "firing"}
    for rule in (unknown, bad_match):
        rule.refresh_from_db()
        assert rule.last_error.startswith("invalid rule") and rule.last_evaluated_at is None
    good[0].refresh_from_db()
    assert good[0].last_evaluated_at == T + timedelta(minutes=2) and good[0].last_error == ""


def test_paused_rules_and_rules_another_tick_holds_are_not_evaluated(alice):
    post_rolled_up(alice, [record("provider.error", ts=ts(1))])
    paused = Rule.objects.create(
        project=alice.project, name="p", metric="provider_errors", threshold=0, paused=True
    )
    held = Rule.objects.create(
        project=alice.project,
        name="h",
        metric="provider_errors",
        threshold=0,
        lease_token="other-tick",
        lease_until=T + timedelta(minutes=3),
    )
    assert tick(2).rules == 0
    assert states(paused) == states(held) == {}
    held.refresh_from_db()
    assert held.lease_token == "other-tick"  # not ours to release
    assert tick(4).rules == 1  # the lease ran out: the holder died
    assert states(held) == {"": "firing"}


def test_the_engine_counts_from_rollups_only(alice):
    rule = Rule.objects.create(
        project=alice.project, name="e", metric="provider_errors", threshold=0
    )
    response = alice.client().post(
        "/api/v1/records", {"records": [record("provider.error", ts=ts(1))]}, format="json"
    )
    assert response.status_code == 200
    tick(2)  # posted but not yet folded in by the workers
    assert states(rule) == {"": "ok"}
    catchup.catch_up()
    tick(3)
    assert states(rule) == {"": "firing"}


def test_a_window_over_an_hour_counts_whole_hours_from_hour_rollups(alice):
    rule = Rule.objects.create(
        project=alice.project,
        name="errors today",
        metric="provider_errors",
        threshold=2,
        window_minutes=120,
    )
    post_rolled_up(alice, [record("provider.error", ts=ts(1, i)) for i in range(3)])  # 09:01
    tick(3)
    assert states(rule) == {"": "firing"}
    tick(110)  # 10:50: the hours 09:00 and 10:00
    assert states(rule) == {"": "firing"}
    tick(125)  # 11:05: the hours 10:00 and 11:00
    assert states(rule) == {"": "ok"}
    assert [e[2] for e in events(rule)] == ["firing", "ok"]

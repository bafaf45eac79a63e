"""Budget rules: a threshold on `cost` over a window, for one agent, posted and folded as in
production, evaluated by the engine's tick and delivered to a real webhook receiver."""

from __future__ import annotations

import json

import pytest

import workers.tasks  # noqa: F401  (registers the tasks)
from alerts import units
from alerts.models import AlertEvent, Channel, Rule
from alerts.windows import Query, query_errors
from tests.support.alert_flow import events, post_rolled_up, states, tick, ts
from tests.support.factories import record
from workers.tasks import deliver_notification_task

pytestmark = pytest.mark.both_dbs
DAY = 24 * 60


def turn(i: int, agent: str, usd: float, minutes: float = 1) -> dict:
    return record("turn", ts=ts(minutes, i), agent=agent, data={"totalCost": usd})


def call(i: int, agent: str, provider: str, model: str, minutes: float = 1) -> dict:
    usage = {"input": 200_000, "output": 20_000, "cacheRead": 100_000}
    data = {"provider": provider, "model": model, "usage": usage}
    return record("model_call", ts=ts(minutes, i), agent=agent, data=data)


def not_ok(rule: Rule) -> dict[str, str]:
    return {group: state for group, state in states(rule).items() if state != "ok"}


def deliver_now(event_id: int, channel_id: int) -> None:
    deliver_notification_task.apply(args=(event_id, channel_id))


def test_a_budget_rule_fires_for_its_agent_and_recovers_when_the_day_passes(
    alice,
    allow_loopback,  # noqa: F811
    receiver_factory,  # noqa: F811
):
    receiver = receiver_factory(200)
    channel = Channel.objects.create(
        project=alice.project, name="budget hook", kind="webhook", url=receiver.url
    )
    rule = Rule.objects.create(
        project=alice.project,
        name="billing budget",
        metric="cost",
        agent="billing-bot",
        comparator="gt",
        threshold=50.0,
        window_minutes=DAY,
    )
    rule.channels.add(channel)

    # Another agent spends far more: the billing rule must not count it.
    post_rolled_up(alice, [turn(i, "support-bot", 40.0) for i in range(5)])
    tick(3, enqueue=deliver_now)
    assert not_ok(rule) == {} and receiver.requests == []

    post_rolled_up(alice, [turn(10 + i, "billing-bot", 20.0, minutes=4) for i in range(2)])
    tick(5, enqueue=deliver_now)
    assert not_ok(rule) == {}  # 40 USD: under budget

    post_rolled_up(alice, [turn(20, "billing-bot", 15.0, minutes=6)])
    tick(7, enqueue=deliver_now)
    assert states(rule) == {"": "firing"}
    fired = AlertEvent.objects.get(rule=rule)
    assert fired.value == pytest.approx(55.0) and fired.count == 3
    (request,) = receiver.requests
    body = json.loads(request["body"])
    assert (body["state"], body["value"], body["threshold"]) == ("firing", 55.0, 50.0)
    assert units.display("cost", fired.value) == "55.00 USD"

    tick(25 * 60, enqueue=deliver_now)  # a day later the window holds no spend
    assert events(rule)[-1] == ("", "firing", "ok", True)
    assert len(receiver.requests) == 2
    assert json.loads(receiver.requests[1]["body"])["resolved"] is True


def test_a_budget_rule_can_match_a_provider_or_the_classifiers_share(alice):
    openai = Rule.objects.create(
        project=alice.project,
        name="openai spend",
        metric="cost",
        match={"provider": "openai"},
        comparator="gt",
        threshold=0.5,
        window_minutes=60,
    )
    classifier = Rule.objects.create(
        project=alice.project,
        name="classifier spend",
        metric="cost",
        match={"kind": "tool_choice.pick"},
        comparator="gt",
        threshold=0.01,
        window_minutes=60,
        group_by="model",
    )
    post_rolled_up(
        alice,
        [call(i, "support-bot", "anthropic", "claude-sonnet-4-5") for i in range(3)]
        + [call(10 + i, "support-bot", "openai", "gpt-4o-mini") for i in range(3)],
    )
    tick(3)
    assert not_ok(openai) == {} and not_ok(classifier) == {}  # gpt-4o-mini is cheap

    post_rolled_up(alice, [call(20 + i, "billing-bot", "openai", "gpt-4o") for i in range(2)])
    tick(4)
    assert states(openai) == {"": "firing"}
    assert not_ok(classifier) == {}  # model calls are the main model's spend, not the picks'

    picks = [record("tool_choice.pick", ts=ts(5, 30 + i)) for i in range(20)]
    for pick in picks:
        pick["data"]["usage"] = {"inputTokens": 10_000, "outputTokens": 50}
    post_rolled_up(alice, picks)
    tick(6)
    assert states(classifier) == {"claude-haiku-4-5": "firing"}


def test_a_per_run_budget_is_per_agent_not_per_model():
    errors = query_errors(Query("cost_per_run", model="gpt-4o"))
    assert "model" in errors
    assert query_errors(Query("cost_per_run", agent="billing-bot", group_by="agent")) == {}
    assert query_errors(Query("cost", match=(("provider", "openai"),))) == {}
    assert "match" in query_errors(Query("cost", match=(("error", "x"),)))


def test_the_window_is_whole_hours_of_spend_after_the_first_one(alice):
    rule = Rule.objects.create(
        project=alice.project,
        name="two hours",
        metric="cost",
        comparator="gt",
        threshold=1.0,
        window_minutes=120,
    )
    post_rolled_up(
        alice, [turn(0, "support-bot", 0.75, minutes=10), turn(1, "support-bot", 0.5, 70)]
    )
    tick(80)
    assert states(rule) == {"": "firing"}
    assert AlertEvent.objects.get(rule=rule).value == pytest.approx(1.25)

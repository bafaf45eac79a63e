"""/api/v1/alert-rules and /api/v1/alert-events: CRUD, permissions, filters and paging.

Personas: alice owns `acme`, bob owns `globex`; charlie is logged in but belongs to neither.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from rest_framework.test import APIClient

from alerts.models import AlertEvent, AlertState, Channel, Notification, Rule
from records.models import Membership
from tests.support.alert_flow import ALERT_RULE, all_key

pytestmark = pytest.mark.both_dbs


def make_rule(persona, **fields) -> Rule:
    return Rule.objects.create(project=persona.project, **{**ALERT_RULE, **fields})


def operator(username: str, *personas) -> APIClient:
    user = get_user_model().objects.create_user(username)
    for persona in personas:
        Membership.objects.create(user=user, project=persona.project, role="admin")
    client = APIClient()
    client.force_login(user)
    return client


# --- rules: CRUD ---------------------------------------------------------------------------------
def test_it_creates_a_rule_in_the_keys_project(alice):
    channel = Channel.objects.create(
        project=alice.project, name="hook", kind="email", addresses=["a@example.com"]
    )
    response = all_key(alice).post(
        "/api/v1/alert-rules", {**ALERT_RULE, "channels": [channel.pk]}, format="json"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["project"] == "acme" and body["channels"] == [channel.pk]
    assert body["states"] == [] and body["paused"] is False and body["silenced"] is False
    rule = Rule.objects.get(pk=body["id"])
    assert rule.project == alice.project and rule.for_minutes == 3


def test_it_reads_updates_and_deletes_a_rule(alice):
    client = all_key(alice)
    rule = make_rule(alice)
    assert client.get(f"/api/v1/alert-rules/{rule.pk}").json()["name"] == "pick errors"

    silence = (timezone.now() + timedelta(hours=1)).isoformat()
    response = client.patch(
        f"/api/v1/alert-rules/{rule.pk}",
        {"paused": True, "silenced_until": silence, "threshold": 0.2},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["silenced"] is True
    rule.refresh_from_db()
    assert rule.paused and rule.threshold == 0.2 and rule.is_silenced()

    assert client.delete(f"/api/v1/alert-rules/{rule.pk}").status_code == 204
    assert not Rule.objects.filter(pk=rule.pk).exists()


def test_it_lists_the_projects_rules_with_each_groups_state(alice, bob):
    rule = make_rule(alice)
    now = timezone.now()
    AlertState.objects.create(
        rule=rule, group="qwen3-8b", state="firing", severity="critical", since=now,
        value=0.3, count=40, updated_at=now,
    )  # fmt: skip
    make_rule(bob, name="bob's")
    body = alice.client(alice.read_key).get("/api/v1/alert-rules").json()
    assert [r["name"] for r in body["results"]] == ["pick errors"]
    assert body["results"][0]["states"][0] | {"since": None, "updated_at": None} == {
        "group": "qwen3-8b",
        "state": "firing",
        "severity": "critical",
        "value": 0.3,
        "count": 40,
        "since": None,
        "notified_at": None,
        "updated_at": None,
    }
    assert body["next"] is None


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"metric": "tokens_per_second"}, "metric"),
        ({"metric": "first_pick_agreement", "group_by": "model"}, "group_by"),
        ({"warning_threshold": 0.5}, "warning_threshold"),
        ({"classifier": "qwen3-8b", "metric": "swap_rate"}, "classifier"),
        ({"match": {"verdict": "block"}}, "match"),
        ({"match": ["verdict"]}, "match"),
        ({"window_minutes": 0}, "window_minutes"),
        ({"comparator": "eq"}, "comparator"),
        ({"no_data": "maybe"}, "no_data"),
    ],
)
def test_it_says_what_is_wrong_with_a_rule(alice, change, field):
    response = all_key(alice).post("/api/v1/alert-rules", {**ALERT_RULE, **change}, format="json")
    assert response.status_code == 400
    assert field in response.json()


def test_a_partial_update_is_validated_against_the_rest_of_the_rule(alice):
    rule = make_rule(alice)  # warning 0.05 below threshold 0.1, comparator gt
    response = all_key(alice).patch(
        f"/api/v1/alert-rules/{rule.pk}", {"comparator": "lt"}, format="json"
    )
    assert response.status_code == 400 and "warning_threshold" in response.json()


def test_a_rule_cannot_notify_another_projects_channel(alice, bob):
    theirs = Channel.objects.create(
        project=bob.project, name="bob's", kind="email", addresses=["b@example.com"]
    )
    response = all_key(alice).post(
        "/api/v1/alert-rules", {**ALERT_RULE, "channels": [theirs.pk]}, format="json"
    )
    assert response.status_code == 400 and "channels" in response.json()


# --- rules: who may do what ------------------------------------------------------------------
def test_a_read_key_reads_but_cannot_change_rules(alice):
    client = alice.client(alice.read_key)
    rule = make_rule(alice)
    assert client.get(f"/api/v1/alert-rules/{rule.pk}").status_code == 200
    assert client.post("/api/v1/alert-rules", ALERT_RULE, format="json").status_code == 403
    response = client.patch(f"/api/v1/alert-rules/{rule.pk}", {"paused": True}, format="json")
    assert response.status_code == 403 and "all" in response.json()["detail"]
    assert client.delete(f"/api/v1/alert-rules/{rule.pk}").status_code == 403
    assert Rule.objects.get(pk=rule.pk).paused is False


def test_an_ingest_key_cannot_touch_rules_and_no_key_is_401(alice):
    assert alice.client().get("/api/v1/alert-rules").status_code == 403
    assert APIClient().get("/api/v1/alert-rules").status_code == 401
    assert APIClient().get("/api/v1/alert-events").status_code == 401


def test_another_projects_rule_is_a_404(alice, bob):
    theirs = make_rule(bob)
    client = all_key(alice)
    url = f"/api/v1/alert-rules/{theirs.pk}"
    assert client.get(url).status_code == 404
    assert client.patch(url, {"paused": True}, format="json").status_code == 404
    assert client.delete(url).status_code == 404
    assert Rule.objects.filter(pk=theirs.pk, paused=False).exists()


def test_an_operator_manages_the_rules_of_their_projects_only(alice, bob):
    client = operator("alice", alice)
    response = client.post("/api/v1/alert-rules", ALERT_RULE, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["project"] == "acme"
    mine = response.json()["id"]
    response = client.patch(f"/api/v1/alert-rules/{mine}", {"paused": True}, format="json")
    assert response.status_code == 200 and Rule.objects.get(pk=mine).paused
    theirs = make_rule(bob)
    assert client.get(f"/api/v1/alert-rules/{theirs.pk}").status_code == 404
    assert client.get("/api/v1/alert-rules?project=globex").status_code == 404


def test_an_operator_of_several_projects_names_one_to_create(alice, bob):
    client = operator("both", alice, bob)
    assert client.post("/api/v1/alert-rules", ALERT_RULE, format="json").status_code == 400
    response = client.post("/api/v1/alert-rules?project=globex", ALERT_RULE, format="json")
    assert response.status_code == 201 and response.json()["project"] == "globex"
    # By id, a rule of either project is theirs.
    mine = make_rule(alice)
    assert client.get(f"/api/v1/alert-rules/{mine.pk}").status_code == 200


def test_a_logged_in_stranger_sees_no_rules(alice):
    make_rule(alice)
    client = operator("charlie")
    assert client.get("/api/v1/alert-rules").status_code == 403
    assert client.post("/api/v1/alert-rules", ALERT_RULE, format="json").status_code == 403


def test_the_rule_list_costs_the_same_queries_however_many_rules(alice, django_assert_num_queries):
    channel = Channel.objects.create(
        project=alice.project, name="hook", kind="email", addresses=["a@example.com"]
    )
    now = timezone.now()
    for i in range(6):
        rule = make_rule(alice, name=f"rule {i}")
        rule.channels.add(channel)
        for group in ("a", "b"):
            AlertState.objects.create(rule=rule, group=group, since=now, updated_at=now)
    client = alice.client(alice.read_key)
    client.get("/api/v1/alert-rules")  # a key's first use in a minute also records it
    # The key, the rules, their channels, their states.
    with django_assert_num_queries(4):
        body = client.get("/api/v1/alert-rules", {"limit": 4}).json()
    assert len(body["results"]) == 4 and body["next"]
    assert all(len(r["states"]) == 2 and r["channels"] == [channel.pk] for r in body["results"])
    rest = client.get(body["next"]).json()
    assert [r["name"] for r in rest["results"]] == ["rule 4", "rule 5"]


# --- events ------------------------------------------------------------------------------------
def make_events(rule: Rule, n: int, **fields) -> list[AlertEvent]:
    now = timezone.now()
    return [
        AlertEvent.objects.create(
            rule=rule,
            project_id=rule.project_id,
            group=fields.get("group", "qwen3-8b"),
            from_state="ok",
            to_state=fields.get("to_state", "firing"),
            severity="critical",
            value=0.2 + i / 100,
            count=30,
            threshold=rule.threshold,
            comparator=rule.comparator,
            window_minutes=rule.window_minutes,
            notify=True,
            at=now - timedelta(minutes=n - i),
        )
        for i in range(n)
    ]


def test_it_lists_events_newest_first_with_their_notifications(alice, bob):
    rule = make_rule(alice)
    channel = Channel.objects.create(
        project=alice.project, name="hook", kind="email", addresses=["a@example.com"]
    )
    events = make_events(rule, 3)
    Notification.objects.create(event=events[-1], channel=channel, status="sent", attempts=2)
    make_events(make_rule(bob), 2)
    body = alice.client(alice.read_key).get("/api/v1/alert-events").json()
    assert [e["id"] for e in body["results"]] == [e.pk for e in reversed(events)]
    newest = body["results"][0]
    assert newest["rule_name"] == "pick errors" and newest["threshold"] == 0.1
    assert newest["value"] == pytest.approx(0.22) and newest["window_minutes"] == 10
    assert newest["notifications"] == [
        {"channel": "hook", "status": "sent", "attempts": 2, "last_error": ""}
    ]


def test_it_filters_events(alice):
    slow, errors = make_rule(alice, name="slow"), make_rule(alice, name="errors")
    make_events(slow, 2, group="haiku")
    make_events(errors, 3, group="qwen3-8b")
    make_events(errors, 1, group="qwen3-8b", to_state="ok")
    client = alice.client(alice.read_key)

    def ids(**params):
        response = client.get("/api/v1/alert-events", params)
        assert response.status_code == 200, response.content
        return [(e["rule_name"], e["group"], e["to_state"]) for e in response.json()["results"]]

    assert len(ids(rule=errors.pk)) == 4
    assert set(ids(group="haiku")) == {("slow", "haiku", "firing")}
    assert ids(rule=errors.pk, state="ok") == [("errors", "qwen3-8b", "ok")]
    future = (timezone.now() + timedelta(minutes=1)).isoformat()
    assert ids(**{"from": future}) == []
    assert client.get("/api/v1/alert-events", {"state": "burning"}).status_code == 400
    assert client.get("/api/v1/alert-events", {"rule": "x"}).status_code == 400


def test_event_pages_follow_the_cursor_in_constant_queries(alice, django_assert_num_queries):
    rule = make_rule(alice)
    channel = Channel.objects.create(
        project=alice.project, name="hook", kind="email", addresses=["a@example.com"]
    )
    events = make_events(rule, 7)
    for event in events:
        Notification.objects.create(event=event, channel=channel)
    client = alice.client(alice.read_key)
    seen = []
    url, params = "/api/v1/alert-events", {"limit": 3}
    client.get(url)  # on SQLite, a key's first lookup in a minute also marks its use
    while url:
        # The key, the events with their rules, the notifications, their channels.
        with django_assert_num_queries(4):
            body = client.get(url, params).json()
        seen += [e["id"] for e in body["results"]]
        url, params = body["next"], None
    assert seen == [e.pk for e in reversed(events)]


def test_events_of_another_project_are_invisible(alice, bob):
    make_events(make_rule(bob), 2)
    assert alice.client(alice.read_key).get("/api/v1/alert-events").json()["results"] == []
    response = operator("alice", alice).get("/api/v1/alert-events?project=globex")
    assert response.status_code == 404


# --- channels ------------------------------------------------------------------------------------
PUBLIC_HOOK = "http://93.184.216.34/hooks/decisionboard"  # an address literal: no DNS needed


def test_it_creates_channels_a_rule_then_notifies(alice):
    client = all_key(alice)
    hook = client.post(
        "/api/v1/alert-channels",
        {"name": "ops hook", "kind": "webhook", "url": PUBLIC_HOOK},
        format="json",
    )
    assert hook.status_code == 201, hook.content
    body = hook.json()
    assert body["project"] == "acme" and body["kind"] == "webhook" and not body["disabled"]
    channel = Channel.objects.get(pk=body["id"])
    assert body["secret"] == channel.secret and len(channel.secret) >= 32
    mail = client.post(
        "/api/v1/alert-channels",
        {"name": "on call", "kind": "email", "addresses": ["oncall@example.com"]},
        format="json",
    )
    assert mail.status_code == 201, mail.content
    rule = client.post(
        "/api/v1/alert-rules",
        {**ALERT_RULE, "channels": [body["id"], mail.json()["id"]]},
        format="json",
    )
    assert rule.status_code == 201, rule.content
    assert sorted(rule.json()["channels"]) == sorted([body["id"], mail.json()["id"]])


@pytest.mark.parametrize(
    "channel, field, message",
    [
        ({"kind": "webhook"}, "url", "a webhook needs a URL"),
        ({"kind": "webhook", "url": "http://127.0.0.1:8080/x"}, "url", "loopback, private"),
        ({"kind": "webhook", "url": "ftp://93.184.216.34/x"}, "url", "http:// or https://"),
        ({"kind": "email"}, "addresses", "at least one address"),
        ({"kind": "email", "addresses": ["not-an-address"]}, "addresses", "valid email"),
        ({"kind": "sms", "url": PUBLIC_HOOK}, "kind", "not a valid choice"),
    ],
)
def test_it_says_what_is_wrong_with_a_channel(alice, channel, field, message):
    response = all_key(alice).post(
        "/api/v1/alert-channels", {"name": "c", **channel}, format="json"
    )
    assert response.status_code == 400, response.content
    assert message in str(response.json()[field])
    assert not Channel.objects.exists()


def test_a_partial_channel_update_is_checked_against_the_rest(alice):
    channel = Channel.objects.create(
        project=alice.project, name="mail", kind="email", addresses=["a@example.com"]
    )
    client = all_key(alice)
    url = f"/api/v1/alert-channels/{channel.pk}"
    refused = client.patch(url, {"kind": "webhook"}, format="json")
    assert refused.status_code == 400 and "url" in refused.json()
    moved = client.patch(url, {"kind": "webhook", "url": PUBLIC_HOOK}, format="json")
    assert moved.status_code == 200, moved.content
    assert Channel.objects.get(pk=channel.pk).url == PUBLIC_HOOK
    assert client.delete(url).status_code == 204
    assert not Channel.objects.exists()


def test_a_read_key_lists_channels_without_their_secrets_and_cannot_change_them(alice):
    channel = Channel.objects.create(project=alice.project, name="hook", kind="webhook",
                                     url=PUBLIC_HOOK)  # fmt: skip
    reader = alice.client(alice.read_key)
    listed = reader.get("/api/v1/alert-channels")
    assert listed.status_code == 200
    assert [(c["name"], "secret" in c) for c in listed.json()["results"]] == [("hook", False)]
    assert listed.json()["next"] is None
    change = reader.patch(f"/api/v1/alert-channels/{channel.pk}", {"name": "x"}, format="json")
    assert change.status_code == 403
    assert reader.post("/api/v1/alert-channels", {"name": "x"}, format="json").status_code == 403
    assert alice.client().get("/api/v1/alert-channels").status_code == 403  # an ingest key


def test_another_projects_channel_is_a_404_and_an_operator_sees_their_own(alice, bob):
    theirs = Channel.objects.create(
        project=bob.project, name="globex mail", kind="email", addresses=["b@example.com"]
    )
    assert all_key(alice).get(f"/api/v1/alert-channels/{theirs.pk}").status_code == 404
    assert all_key(alice).delete(f"/api/v1/alert-channels/{theirs.pk}").status_code == 404
    carol = operator("carol", bob)
    seen = carol.get(f"/api/v1/alert-channels/{theirs.pk}")
    assert seen.status_code == 200 and seen.json()["secret"] == theirs.secret
    assert [c["name"] for c in carol.get("/api/v1/alert-channels").json()["results"]] == [
        "globex mail"
    ]
    assert Channel.objects.filter(pk=theirs.pk).exists()


def test_it_enables_a_channel_the_workers_disabled(alice):
    channel = Channel.objects.create(
        project=alice.project, name="hook", kind="webhook", url=PUBLIC_HOOK, disabled=True,
        disabled_at=timezone.now(), consecutive_failures=10,
    )  # fmt: skip
    response = all_key(alice).post(f"/api/v1/alert-channels/{channel.pk}/enable")
    assert response.status_code == 200, response.content
    assert response.json()["disabled"] is False and response.json()["consecutive_failures"] == 0
    channel.refresh_from_db()
    assert not channel.disabled and channel.disabled_at is None

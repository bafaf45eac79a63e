"""Alert rules driven through posted records and the engine's clock."""

from __future__ import annotations

from datetime import timedelta

from rest_framework.test import APIClient

from alerts import engine
from alerts.models import AlertEvent, AlertState, Rule
from records import catchup
from records.models import ApiKey
from tests.support.factories import BASE_TS


def make_rule(persona, **fields) -> Rule:
    defaults = {
        "name": "slow classifier",
        "metric": "classifier_latency_p95",
        "threshold": 1000.0,
        "group_by": "model",
        "window_minutes": 5,
    }
    return Rule.objects.create(project=persona.project, **{**defaults, **fields})


T = BASE_TS


def ts(minutes: float, i: int = 0) -> str:
    moment = T + timedelta(minutes=minutes, milliseconds=i)
    return moment.isoformat().replace("+00:00", "Z")


def post_rolled_up(persona, records: list[dict]) -> None:
    response = persona.client().post("/api/v1/records", {"records": records}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["accepted"] == len(records)
    catchup.catch_up()


def tick(minutes: float, **kwargs):
    return engine.evaluate_all(now=T + timedelta(minutes=minutes), **kwargs)


def states(rule: Rule) -> dict[str, str]:
    return dict(AlertState.objects.filter(rule=rule).values_list("group", "state"))


def events(rule: Rule) -> list[tuple]:
    return list(
        AlertEvent.objects.filter(rule=rule)
        .order_by("id")
        .values_list("group", "from_state", "to_state", "notify")
    )


ALERT_RULE = {
    "name": "pick errors",
    "metric": "pick_error_rate",
    "group_by": "model",
    "comparator": "gt",
    "threshold": 0.1,
    "warning_threshold": 0.05,
    "window_minutes": 10,
    "min_records": 20,
    "for_minutes": 3,
    "no_data": "ok",
    "renotify_minutes": 60,
}


def all_key(persona) -> APIClient:
    _, raw = ApiKey.issue(persona.project, ApiKey.Scope.ALL)
    return persona.client(raw)

"""Every page, form and API endpoint against every role: viewer, editor and admin of `acme`, a
member of another project only (a stranger to `acme`), and nobody logged in.

The cases are read from the URL configuration, so a URL added later with no rule in
config.roles, or none here, fails naming it. What each URL needs is written out in `SPEC` below,
apart from config.roles, as the specification the answers are held to: an allowed read is a
2xx, an allowed change a 2xx (API) or a redirect (a page's form), a role too low a 403 naming
the role, a stranger a 404, nobody a login redirect (pages) or a 401/403 (the API).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from rest_framework.test import APIClient

from alerts.models import Channel, Rule
from config import roles
from records import catchup, member_changes
from records.models import ApiKey, AuditEntry, Membership, PriceOverride
from tests.support.alert_flow import ALERT_RULE
from tests.support.cost_data import OVERRIDE
from tests.support.factories import record
from tests.support.module_data import module_transaction
from tests.support.services import Persona
from workers.export_jobs import run_export
from workers.models import ExportJob

V, E, A = "viewer", "editor", "admin"
PERSONAS = ("viewer", "editor", "admin", "stranger", "anonymous")
RANK = {V: 0, E: 1, A: 2}

# url name -> (role its reads need, role its changes need; None: no session changes anything).
SPEC: dict[str, tuple[str, str | None]] = {
    "dash-overview": (V, None),
    "dash-runs": (V, None),
    "dash-runs-compare": (V, None),
    "dash-pick": (V, None),
    "dash-run-detail": (V, None),
    "dash-models": (V, None),
    "dash-fallbacks": (V, None),
    "dash-fallback-run": (V, None),
    "dash-sessions": (V, None),
    "dash-session": (V, None),
    "dash-classifiers": (V, None),
    "dash-streaks": (V, None),
    "dash-tools": (V, None),
    "dash-tool": (V, None),
    "dash-selection": (V, None),
    "dash-narrowing": (V, None),
    "dash-changes": (V, None),
    "dash-project": (V, None),
    "dash-project-member": (A, A),
    "dash-project-settings": (A, A),
    "dash-project-invite": (A, A),
    "dash-project-invitation-revoke": (A, A),
    "dash-audit": (A, None),
    "dash-switch-project": (V, V),
    "dash-exports": (V, V),
    "dash-keys": (V, A),
    "dash-key-revoke": (A, A),
    "dash-alerts": (V, None),
    "dash-alert-events": (V, None),
    "dash-alert-new": (E, E),
    "dash-alert-edit": (E, E),
    "dash-alert-pause": (E, E),
    "dash-alert-silence": (E, E),
    "dash-alert-delete": (E, E),
    "dash-alert-channel-new": (E, E),
    "dash-alert-channel-edit": (E, E),
    "dash-alert-channel-test": (E, E),
    "dash-alert-channel-enable": (E, E),
    "api-records": (V, None),
    "api-releases": (V, None),
    "api-runs": (V, None),
    "api-run": (V, None),
    "api-export": (V, None),
    "api-exports": (V, V),
    "api-export-job": (V, None),
    "api-export-download": (V, None),
    "api-metric": (V, None),
    "api-streaks": (V, None),
    "api-changes": (V, None),
    "api-audit": (A, None),
    "api-audit-export": (A, None),
    "api-alert-events": (V, None),
    "api-alert-rules-list": (V, E),
    "api-alert-rules-detail": (V, E),
    "api-alert-channels-list": (V, E),
    "api-alert-channels-detail": (V, E),
    "api-alert-channels-enable": (V, E),
    "api-price-overrides-list": (V, E),
    "api-price-overrides-detail": (V, E),
}
# Not governed by roles: login and its pages, probes, the API's documentation, Django's admin,
# and the endpoints only a key reaches.
UNGOVERNED = {
    "dash-favicon",
    "api-schema",
    "api-docs",
    "api-docs-asset",
    "api-otlp-traces",
    "otlp-traces",
    "ops-metrics",
    "ops-healthz",
    "ops-readyz",
    "login",
    "logout",
    "sso-start",
    "sso-callback",
    "password_change",
    "password_change_done",
    "password_reset",
    "password_reset_done",
    "password_reset_confirm",
    "password_reset_complete",
    "dash-invitation-accept",
}

# URLs that take only changes: a GET is a 405 once the role allows it.
CHANGE_ONLY = {
    "dash-project-member",
    "dash-project-settings",
    "dash-project-invite",
    "dash-project-invitation-revoke",
    "dash-switch-project",
    "dash-key-revoke",
    "dash-alert-pause",
    "dash-alert-silence",
    "dash-alert-delete",
    "dash-alert-channel-test",
    "dash-alert-channel-enable",
    "api-alert-channels-enable",
}
# What a read needs besides the project to answer a 200.
QUERIES = {
    "dash-runs-compare": "a=run-1&b=run-1",
    "api-export": "format=csv",
    "api-changes": "a=2026-11-01..2026-11-08&b=2026-11-08..2026-11-15",
    "dash-changes": "a=2026-11-01..2026-11-08&b=2026-11-08..2026-11-15",
    "api-audit-export": "format=csv",
}

RULE_FORM = {
    "project": "acme",
    "name": "slow picks",
    "metric": "classifier_latency_p95",
    "comparator": "gt",
    "threshold": "1000",
    "window_minutes": "5",
    "min_records": "1",
    "for_minutes": "0",
    "no_data": "ok",
    "renotify_minutes": "0",
}
MAIL = {"name": "on call", "kind": "email", "addresses": ["oncall@example.com"]}


@dataclass(frozen=True)
class Change:
    method: str
    body: dict = field(default_factory=dict)


# The change each URL takes, with a valid body.
CHANGES: dict[str, list[Change]] = {
    "dash-switch-project": [Change("post", {"project": "acme", "next": "/runs/"})],
    "dash-exports": [Change("post", {"project": "acme", "format": "csv"})],
    "dash-keys": [Change("post", {"project": "acme", "name": "agent", "scope": "ingest"})],
    "dash-project-member": [Change("post", {"project": "acme", "username": V, "role": E})],
    "dash-project-settings": [Change("post", {"project": "acme", "retention_days": "30"})],
    "dash-project-invite": [
        Change("post", {"project": "acme", "email": "new@example.com", "role": E})
    ],
    "dash-project-invitation-revoke": [Change("post")],
    "dash-key-revoke": [Change("post")],
    "dash-alert-new": [Change("post", RULE_FORM)],
    "dash-alert-edit": [Change("post", RULE_FORM)],
    "dash-alert-pause": [Change("post", {"paused": "1"})],
    "dash-alert-silence": [Change("post", {"minutes": "60"})],
    "dash-alert-delete": [Change("post")],
    "dash-alert-channel-new": [
        Change("post", {"project": "acme", **MAIL, "addresses": "oncall@example.com"})
    ],
    "dash-alert-channel-edit": [Change("post", {**MAIL, "addresses": "oncall@example.com"})],
    "dash-alert-channel-test": [Change("post")],
    "dash-alert-channel-enable": [Change("post")],
    "api-records": [Change("post", {"records": [record("model_call", run_id="run-2")]})],
    "api-releases": [Change("post", {"name": "v1", "agent": "support-bot"})],
    "api-exports": [Change("post", {"format": "csv"})],
    "api-alert-rules-list": [Change("post", ALERT_RULE)],
    "api-alert-rules-detail": [Change("patch", {"name": "renamed"}), Change("delete")],
    "api-alert-channels-list": [Change("post", MAIL)],
    "api-alert-channels-detail": [Change("patch", {"name": "renamed"}), Change("delete")],
    "api-alert-channels-enable": [Change("post")],
    "api-price-overrides-list": [Change("post", OVERRIDE)],
    "api-price-overrides-detail": [Change("patch", {"input_per_mtok": 3}), Change("delete")],
}


# The changes the audit log records (docs/access.md, "The audit log"): keys, members, settings,
# alert rules and their silences, channels, price overrides. Switching project, exports, ingest
# and a channel's test message change none of those.
NOT_AUDITED = {
    "dash-switch-project",
    "dash-exports",
    "api-records",
    "api-exports",
    "dash-alert-channel-test",
}


def url_names() -> list[str]:
    """Every named URL outside Django's admin, walked from the root URL configuration."""
    names: list[str] = []

    def walk(resolver: URLResolver) -> None:
        for entry in resolver.url_patterns:
            if isinstance(entry, URLResolver):
                if entry.namespace not in roles.OPEN_NAMESPACES:
                    walk(entry)
            elif isinstance(entry, URLPattern):
                names.append(entry.name)

    walk(get_resolver())
    return names


def governed() -> list[str]:
    return [name for name in url_names() if name not in UNGOVERNED]


def cases() -> list:
    out = []
    for name in governed():
        spec = SPEC.get(name)
        if spec is None:
            continue  # test_every_url_has_a_rule_and_a_specification names it
        for persona in PERSONAS:
            out.append(pytest.param(name, Change("get"), persona, id=f"{name}-get-{persona}"))
            for change in CHANGES.get(name, []):
                out.append(
                    pytest.param(name, change, persona, id=f"{name}-{change.method}-{persona}")
                )
    return out


def test_every_url_has_a_rule_and_a_specification():
    names = url_names()
    assert names.count("dash-overview") == 1 and "api-alert-rules-detail" in names
    no_rule = [n for n in names if n not in roles.RULES and not roles.is_open(n)]
    assert no_rule == [], f"URLs with no role rule in config/roles.py: {no_rule}"
    unspecified = [n for n in governed() if n not in SPEC]
    assert unspecified == [], f"URLs with no expected roles in {__name__}.SPEC: {unspecified}"
    assert set(UNGOVERNED) == set(roles.OPEN)
    stale = sorted(set(roles.RULES) - set(names))
    assert stale == [], f"Role rules for URLs that no longer exist: {stale}"
    untried = [n for n, (_, change) in SPEC.items() if change and n not in CHANGES]
    assert untried == [], f"URLs whose changes the matrix does not try: {untried}"


@pytest.fixture(scope="module")
def module_world(django_db_setup, django_db_blocker, tmp_path_factory):
    """`acme` with a run, a session, a tool, a key, a rule, a channel, an export, a price and an
    invitation; its viewer, editor and admin; and a member of `globex` only. Made once for the
    module's hundreds of cases (tests/support/module_data.py)."""
    with module_transaction(django_db_blocker, tmp_path_factory.mktemp("role-matrix")):
        yield make_world()


@pytest.fixture
def world(module_world, db):
    return module_world


def make_world():
    acme, globex = Persona("acme"), Persona("globex")
    posted = [
        record("tool_choice.pick", run_id="run-1"),
        record("model_call", run_id="run-1"),
        record("tool_choice.outcome", run_id="run-1"),
    ]
    answer = acme.client().post("/api/v1/records", {"records": posted}, format="json")
    assert answer.status_code == 200, answer.content
    catchup.catch_up()
    objects = {
        "key": ApiKey.issue(acme.project, ApiKey.Scope.INGEST, "agent")[0],
        "rule": Rule.objects.create(
            project=acme.project, name="r", metric="pick_error_rate", comparator="gt", threshold=1
        ),
        "channel": Channel.objects.create(
            project=acme.project, name="c", kind="email", addresses=["a@example.com"]
        ),
        "job": ExportJob.objects.create(project=acme.project, format="csv"),
        "override": PriceOverride.objects.create(
            project=acme.project, model="m", input_per_mtok=1, output_per_mtok=2
        ),
        "invitation": member_changes.invite(
            acme.project, "invited@example.com", V, None, lambda invitation, token: None
        ),
    }
    assert run_export(objects["job"].pk).status == ExportJob.Status.DONE
    users = {}
    for role in (V, E, A):
        user = get_user_model().objects.create_user(role)
        Membership.objects.create(user=user, project=acme.project, role=role)
        users[role] = user
    users["stranger"] = get_user_model().objects.create_user("stranger")
    Membership.objects.create(user=users["stranger"], project=globex.project, role=A)
    return objects, users


def path_of(name: str, objects: dict) -> str:
    by_argument = {
        "run_id": "run-1",
        "iteration": 0,
        "session_id": "sess-1",
        "name": record("tool_choice.pick")["data"]["chosen"],
        "key_id": objects["key"].pk,
        "rule_id": objects["rule"].pk,
        "channel_id": objects["channel"].pk,
        "invitation_id": objects["invitation"].pk,
        "job_id": objects["job"].pk,
        "metric": "pick_error_rate",
    }
    items = {"rules": "rule", "channels": "channel", "overrides": "override"}
    arguments = get_resolver().reverse_dict.getlist(name)[0][0][0][1]
    kwargs = {}
    for argument in arguments:
        if argument == "pk":
            kwargs["pk"] = objects[items[name.split("-")[2]]].pk
        else:
            kwargs[argument] = by_argument[argument]
    query = "&".join(filter(None, ["project=acme", QUERIES.get(name)]))
    return reverse(name, kwargs=kwargs) + "?" + query


def expected(name: str, change: Change, persona: str) -> set[int] | str:
    read, needed_for_change = SPEC[name]
    api = name.startswith("api-")
    if persona == "anonymous":
        return {401, 403} if api else "login"
    if persona == "stranger":
        if change.method == "get" and name in CHANGE_ONLY:
            return {404, 405}
        return {404} if needed_for_change or change.method == "get" else {401, 403}
    if change.method == "get":
        needed = read
    elif needed_for_change is None:
        return {401, 403}  # a key's alone (ingest)
    else:
        needed = needed_for_change
    if RANK[persona] < RANK[needed]:
        return {403}
    if change.method == "get":
        return {405} if name in CHANGE_ONLY else {200}
    if api:
        return {200, 201, 204}
    return {302}


@pytest.mark.parametrize("name,change,persona", cases())
def test_each_url_answers_each_role_as_specified(world, name, change, persona, settings):
    objects, users = world
    client = APIClient() if name.startswith("api-") else Client()
    if persona != "anonymous":
        client.force_login(users[persona])
    path = path_of(name, objects)
    send = getattr(client, change.method)
    if name.startswith("api-"):
        response = send(path, change.body, format="json")
    elif change.method == "get":
        response = send(path)
    else:
        response = send(path, change.body)
    want = expected(name, change, persona)
    seen = f"{change.method.upper()} {path} as {persona}: {response.status_code}"
    if want == "login":
        assert response.status_code == 302, seen
        assert response["Location"].startswith(settings.LOGIN_URL), seen
        return
    assert response.status_code in want, seen
    if want == {403} and persona in RANK:
        needed = SPEC[name][0 if change.method == "get" else 1]
        text = response.json()["detail"] if name.startswith("api-") else response.content.decode()
        assert f"needs the {needed} role in acme" in text, seen


def send_as(name: str, change: Change, user, objects: dict):
    client = APIClient() if name.startswith("api-") else Client()
    client.force_login(user)
    path = path_of(name, objects)
    if name.startswith("api-"):
        return getattr(client, change.method)(path, change.body, format="json")
    return getattr(client, change.method)(path, change.body)


@pytest.mark.parametrize("persona", [V, E, A])
def test_each_change_the_matrix_makes_is_one_audit_entry_and_a_refused_one_none(world, persona):
    objects, users = world
    # Disabled, so that enabling it is a change.
    Channel.objects.filter(pk=objects["channel"].pk).update(disabled=True)
    made = 0
    for name, changes in CHANGES.items():
        for change in changes:
            # Each change from the same world: its savepoint is rolled back once counted.
            with transaction.atomic():
                last = AuditEntry.objects.order_by("-id").values_list("id", flat=True).first()
                response = send_as(name, change, users[persona], objects)
                entries = list(AuditEntry.objects.filter(id__gt=last or 0))
                transaction.set_rollback(True)
            want = expected(name, change, persona)
            seen = f"{change.method.upper()} {name} as {persona}: {response.status_code}"
            assert response.status_code in want, seen
            done = want <= {200, 201, 204, 302}
            if done and name not in NOT_AUDITED:
                made += 1
                assert len(entries) == 1, f"{seen}: {[str(e) for e in entries]}"
                entry = entries[0]
                assert (entry.actor_name, entry.actor_user_id) == (persona, users[persona].pk)
                assert entry.project.name == "acme" and entry.address == "127.0.0.1", seen
            else:
                assert entries == [], f"{seen}: {[str(e) for e in entries]}"
    # An editor changes alerting and prices; an admin also keys, members, invitations and
    # settings.
    assert made == {V: 0, E: 18, A: 24}[persona]

"""The audit log's write (records.store.audit_trail): an entry commits or rolls back with its
change, holds only what changed and never a secret, names who and from where, and is written
by every place a change is made: the pages, the API, Django's admin and the commands."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import transaction
from rest_framework.test import APIClient

from alerts.models import Channel, Rule
from dashboard.views.api_keys import SESSION_NEW_KEY
from records.models import ApiKey, AuditEntry, Membership, Project
from records.store import audit_trail
from tests.support.alert_flow import ALERT_RULE
from tests.support.pages import operator


def entries(**filters) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(**filters).order_by("id"))


def everything_written() -> str:
    return json.dumps(
        list(AuditEntry.objects.values("actor_name", "object_name", "before", "after"))
    )


@pytest.fixture
def admin_page(alice):
    return operator("alice", alice)


def test_an_entry_rolls_back_with_a_change_that_fails_after_it(alice):
    actor = audit_trail.command_actor("a test")
    with pytest.raises(RuntimeError, match="after the entry"), transaction.atomic():
        key, _ = ApiKey.issue(alice.project, ApiKey.Scope.READ, "doomed")
        assert audit_trail.record_change("create", key, actor=actor, before=None) is not None
        assert AuditEntry.objects.count() == 1
        raise RuntimeError("the change fails after the entry")

    assert AuditEntry.objects.count() == 0
    assert not ApiKey.objects.filter(name="doomed").exists()


@pytest.mark.django_db(transaction=True)
def test_an_entry_outside_a_transaction_is_refused():
    project = Project.objects.create(name="acme")
    with pytest.raises(RuntimeError, match="transaction"):
        audit_trail.record(
            project, "update", "project", actor=audit_trail.command_actor("a test"), after={}
        )
    assert AuditEntry.objects.count() == 0


def test_it_keeps_only_the_fields_that_changed_and_nothing_for_no_change(alice):
    rule = Rule.objects.create(project=alice.project, name="r", metric="records", threshold=1)
    actor = audit_trail.command_actor("a test")
    with transaction.atomic():
        before = audit_trail.snapshot(rule)
        rule.threshold, rule.name = 5, "renamed"
        rule.save()
        entry = audit_trail.record_change("update", rule, actor=actor, before=before)
        unchanged = audit_trail.snapshot(rule)
        assert audit_trail.record_change("update", rule, actor=actor, before=unchanged) is None
    assert entry.before == {"name": "r", "threshold": 1}
    assert entry.after == {"name": "renamed", "threshold": 5}
    assert (entry.action, entry.object_type, entry.object_name) == (
        "update",
        "alert_rule",
        "renamed",
    )
    assert AuditEntry.objects.count() == 1


def test_minting_and_revoking_a_key_on_the_page_never_writes_its_secret(alice, admin_page):
    answer = admin_page.post("/keys/", {"project": "acme", "name": "agent", "scope": "read"})
    assert answer.status_code == 302
    raw = admin_page.session[SESSION_NEW_KEY]["raw"]  # what the next page shows once
    key = ApiKey.objects.get(name="agent")
    assert admin_page.post(f"/keys/{key.pk}/revoke/").status_code == 302

    minted, revoked = entries(object_type="api_key")
    assert (minted.action, minted.before) == ("mint", None)
    assert minted.after == {
        "name": "agent", "scope": "read", "prefix": key.prefix, "rate_limit": "",
        "revoked_at": None,
    }  # fmt: skip
    assert revoked.action == "revoke" and list(revoked.after) == ["revoked_at"]
    assert revoked.object_name == f"{key.prefix}… agent"
    written = everything_written()
    assert len(raw) > 20 and raw not in written and raw[len(key.prefix) :] not in written
    assert key.key_hash not in written


def test_a_channel_is_recorded_without_its_secret_and_its_webhooks_path(alice, settings):
    settings.DECISIONBOARD = {**settings.DECISIONBOARD, "ALERTS_ALLOW_PRIVATE_WEBHOOKS": True}
    user = get_user_model().objects.create_user("alice")
    Membership.objects.create(user=user, project=alice.project, role="editor")
    client = APIClient()
    client.force_login(user)
    url = "http://127.0.0.1:9/services/T0/B0/tok3n?sig=s3cret"
    body = {"name": "hook", "kind": "webhook", "url": url}
    answer = client.post("/api/v1/alert-channels?project=acme", body, format="json")
    assert answer.status_code == 201, answer.content

    (entry,) = entries(object_type="channel")
    assert entry.after == {
        "name": "hook", "kind": "webhook", "url": "http://127.0.0.1/…", "addresses": [],
        "disabled": False,
    }  # fmt: skip
    written = everything_written()
    assert Channel.objects.get().secret not in written
    assert "tok3n" not in written and "s3cret" not in written


def test_the_address_is_the_peers_and_a_forwarded_for_header_is_not_believed(alice, admin_page):
    answer = admin_page.post(
        "/project/settings/",
        {"project": "acme", "retention_days": "9"},
        REMOTE_ADDR="203.0.113.7",
        HTTP_X_FORWARDED_FOR="198.51.100.1",
    )
    assert answer.status_code == 302

    (entry,) = entries()
    assert (entry.action, entry.object_type, entry.object_name) == ("update", "project", "acme")
    assert (entry.before, entry.after) == ({"retention_days": None}, {"retention_days": 9})
    assert (entry.actor_kind, entry.actor_name, entry.address) == ("user", "alice", "203.0.113.7")


def test_members_added_given_another_role_and_removed_are_three_entries(alice, admin_page):
    get_user_model().objects.create_user("bob")
    for role in ("viewer", "editor", ""):
        form = {"project": "acme", "username": "bob", "role": role}
        assert admin_page.post("/project/members/", form).status_code == 302
    # The last admin cannot be removed: refused, and not recorded.
    form = {"project": "acme", "username": "alice", "role": ""}
    assert admin_page.post("/project/members/", form).status_code == 302

    bob = get_user_model().objects.get(username="bob")
    assert [(e.action, e.object_id, e.before, e.after) for e in entries()] == [
        ("add", str(bob.pk), None, {"user": "bob", "role": "viewer"}),
        ("change_role", str(bob.pk), {"role": "viewer"}, {"role": "editor"}),
        ("remove", str(bob.pk), {"user": "bob", "role": "editor"}, None),
    ]


def test_a_change_by_an_api_key_names_the_key(alice):
    key, raw = ApiKey.issue(alice.project, ApiKey.Scope.ALL, "deployer")
    client = alice.client(raw)
    answer = client.post("/api/v1/alert-rules", ALERT_RULE, format="json")
    assert answer.status_code == 201, answer.content
    rule_id = answer.json()["id"]
    assert client.patch(f"/api/v1/alert-rules/{rule_id}", {"paused": True}).status_code == 200
    assert client.delete(f"/api/v1/alert-rules/{rule_id}").status_code == 204

    created, paused, deleted = entries()
    assert [e.action for e in (created, paused, deleted)] == ["create", "pause", "delete"]
    assert created.after["name"] == ALERT_RULE["name"] and created.before is None
    assert deleted.after is None and deleted.before["paused"] is True
    for entry in (created, paused, deleted):
        assert (entry.actor_kind, entry.actor_key_id) == ("key", key.pk)
        assert entry.actor_name == f"{key.prefix}… deployer" and raw not in entry.actor_name


def test_create_api_key_records_the_key_it_mints(db):
    out = StringIO()
    call_command("create_api_key", "acme", "--scope", "read", "--name", "cron", stdout=out)

    (entry,) = entries()
    assert (entry.actor_kind, entry.actor_name) == ("system", "manage.py create_api_key")
    assert (entry.action, entry.object_type, entry.address) == ("mint", "api_key", None)
    assert out.getvalue().splitlines()[-1] not in everything_written()


def test_changes_in_djangos_admin_are_recorded(alice, admin_client):
    key = alice.read_key_obj
    form = {
        "project": alice.project.pk, "name": "renamed", "scope": "read", "rate_limit": "",
        "revoked_at_0": "", "revoked_at_1": "",
    }  # fmt: skip
    answer = admin_client.post(f"/admin/records/apikey/{key.pk}/change/", form)
    assert answer.status_code == 302, answer.content.decode()[:2000]
    rule = Rule.objects.create(project=alice.project, name="r", metric="records", threshold=1)
    answer = admin_client.post(f"/admin/alerts/rule/{rule.pk}/delete/", {"post": "yes"})
    assert answer.status_code == 302
    channels = [
        Channel.objects.create(project=alice.project, name=n, kind="email", addresses=["a@b.c"])
        for n in ("one", "two")
    ]
    action = {
        "action": "delete_selected",
        "post": "yes",
        "_selected_action": [c.pk for c in channels],
    }
    assert admin_client.post("/admin/alerts/channel/", action).status_code == 302

    renamed, deleted, *channels_gone = entries()
    assert (renamed.action, renamed.before, renamed.after) == (
        "update", {"name": ""}, {"name": "renamed"}
    )  # fmt: skip
    assert (deleted.action, deleted.object_type, deleted.object_name) == (
        "delete",
        "alert_rule",
        "r",
    )
    assert sorted(e.object_name for e in channels_gone) == ["one", "two"]
    assert {e.actor_name for e in entries()} == {"admin"}


def admin_form(response) -> dict:
    """The data a browser would post back from an admin change page, as the page shows it."""
    data: dict = {}

    def take(form) -> None:
        for name, field in form.fields.items():
            value = form[name].value()
            widget = field.widget
            if hasattr(widget, "widgets"):  # a split date and time
                parts = widget.decompress(value)
                for i, part in enumerate(parts):
                    data[f"{form.add_prefix(name)}_{i}"] = "" if part is None else part
            elif isinstance(value, bool):
                if value:
                    data[form.add_prefix(name)] = "on"
            elif value is not None:
                data[form.add_prefix(name)] = value

    take(response.context["adminform"].form)
    for inline in response.context["inline_admin_formsets"]:
        formset = inline.formset
        take(formset.management_form)
        for form in formset.forms:  # the blank ones too, holding their defaults
            take(form)
    return data


def test_members_and_redaction_rules_changed_in_the_projects_admin_are_recorded(
    alice, admin_client
):
    bob = get_user_model().objects.create_user("bob")
    Membership.objects.create(user=bob, project=alice.project, role="viewer")
    url = f"/admin/records/project/{alice.project.pk}/change/"
    data = admin_form(admin_client.get(url))
    assert data["memberships-0-role"] == "viewer"
    data["memberships-0-role"] = "editor"
    data["retention_days"] = "7"
    data["redaction_rules-TOTAL_FORMS"] = "1"
    data |= {"redaction_rules-0-kind": "json_key", "redaction_rules-0-value": "password"}
    answer = admin_client.post(url, data)
    assert answer.status_code == 302, answer.context and answer.context["errors"]

    assert [(e.object_type, e.action, e.before, e.after) for e in entries()] == [
        ("member", "change_role", {"role": "viewer"}, {"role": "editor"}),
        ("redaction_rule", "create", None, {"kind": "json_key", "name": "", "value": "password"}),
        ("project", "update", {"retention_days": None}, {"retention_days": 7}),
    ]

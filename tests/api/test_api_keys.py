"""`manage.py create_api_key` and how keys are kept."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from records.models import ApiKey, Project, hash_key
from records.store.key_lookup import find_live_key


def create(*args) -> list[str]:
    out = StringIO()
    call_command("create_api_key", *args, stdout=out)
    return out.getvalue().strip().splitlines()


@pytest.mark.django_db
def test_it_creates_the_project_and_prints_the_key_alone_on_the_last_line():
    lines = create("acme")
    raw = lines[-1]
    assert raw.startswith("dbk_") and " " not in raw
    key = ApiKey.objects.get()
    assert key.project == Project.objects.get(name="acme")
    assert key.scope == "ingest"


@pytest.mark.django_db
def test_it_stores_only_a_hash_of_the_key():
    raw = create("acme", "--scope", "read")[-1]
    key = ApiKey.objects.get()
    assert key.key_hash == hash_key(raw) and raw not in key.key_hash
    assert key.prefix == raw[:10] and key.scope == "read"


@pytest.mark.django_db
def test_it_adds_keys_to_an_existing_project():
    create("acme")
    create("acme", "--scope", "all")
    assert Project.objects.count() == 1
    assert sorted(ApiKey.objects.values_list("scope", flat=True)) == ["all", "ingest"]


@pytest.mark.django_db
def test_it_refuses_a_project_name_that_is_not_a_slug():
    with pytest.raises(CommandError, match="not a valid project name"):
        create("Acme Corp")


@pytest.mark.django_db
def test_it_refuses_an_unknown_scope():
    with pytest.raises(CommandError):
        create("acme", "--scope", "admin")


@pytest.mark.django_db
def test_the_admin_lists_keys_without_their_secret(admin_client):
    raw = create("acme")[-1]
    page = admin_client.get("/admin/records/apikey/").content.decode()
    assert raw[:10] in page and raw not in page


def test_a_key_records_its_last_use_at_most_once_a_minute(
    alice, settings, django_assert_num_queries
):
    # Every request reads the key here, as a process that has not cached it does (api.auth).
    settings.DECISIONBOARD = {**settings.DECISIONBOARD, "API_KEY_CACHE_SECONDS": 0}
    key = alice.read_key_obj
    assert key.last_used_at is None
    client = alice.client(alice.read_key)
    assert client.get("/api/v1/runs").status_code == 200
    key.refresh_from_db()
    first = key.last_used_at
    assert first is not None and timezone.now() - first < timedelta(seconds=5)
    # Within the minute: no write (the key and the page only).
    with django_assert_num_queries(2):
        client.get("/api/v1/runs")
    key.refresh_from_db()
    assert key.last_used_at == first


def fields(instance) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in instance._meta.concrete_fields}


@pytest.mark.both_dbs
def test_a_key_lookup_marks_its_use_at_most_once_a_minute(alice):
    key = alice.read_key_obj
    now = timezone.now()
    found = find_live_key(key.key_hash, now)
    stored = ApiKey.objects.select_related("project").get(pk=key.pk)
    assert found.last_used_at == stored.last_used_at == now
    assert fields(found) == fields(stored) and fields(found.project) == fields(stored.project)
    assert find_live_key(key.key_hash, now + timedelta(seconds=59)).last_used_at == now
    later = now + timedelta(minutes=1)
    assert find_live_key(key.key_hash, later).last_used_at == later
    key.refresh_from_db()
    assert key.last_used_at == later
    key.revoke()
    assert find_live_key(key.key_hash, later + timedelta(minutes=5)) is None
    key.refresh_from_db()
    assert key.last_used_at == later


def test_a_key_is_read_and_marked_in_one_statement_on_postgresql(
    postgres, alice, django_assert_num_queries
):
    # The primary may be a round trip away from a web process that reads a replica: the mark
    # rides on the lookup.
    with django_assert_num_queries(1):
        found = find_live_key(alice.read_key_obj.key_hash)
    assert found.last_used_at is not None and found.project.name == "acme"

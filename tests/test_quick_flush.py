"""The transactional tests' flush (tests/support/quick_flush.py) leaves what Django's leaves."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import connection

from records.models import Record, RecordKey
from records.store.ingest import ingest
from tests.support.factories import record
from tests.support.quick_flush import KEPT, empty_tables
from tests.support.services import Persona


def rows_left() -> dict[str, int]:
    names = connection.introspection.django_table_names(only_existing=True)
    with connection.cursor() as cursor:
        cursor.execute(" UNION ALL ".join(f"SELECT '{n}', count(*) FROM {n}" for n in names))
        return {name: count for name, count in cursor.fetchall() if count}


# Transactional, as the tests it ends: the rows it empties were committed.
@pytest.mark.django_db(transaction=True)
def test_every_table_is_empty_after_it_but_the_content_types(postgres):
    now = datetime.now(UTC)
    alice, bob = Persona("acme"), Persona("globex")
    # records today, on an older day and before the oldest partition (the default one)
    times = [now, now - timedelta(days=3), now - timedelta(days=400)]
    for persona in (alice, bob):
        posted = [record("tool_choice.pick", ts=ts.isoformat()) for ts in times * 2]
        assert ingest(persona.project.id, enumerate(posted), now=now).accepted == len(posted)
    assert Record.objects.count() == 12 and RecordKey.objects.count() == 12
    content_types = ContentType.objects.count()

    empty_tables("default")

    assert set(rows_left()) == set(KEPT)
    assert ContentType.objects.count() == content_types > 0


@pytest.mark.django_db(transaction=True)
def test_it_leaves_sequences_where_they_were(postgres):
    first = Persona("acme").project.id
    empty_tables("default")
    assert Persona("acme").project.id > first

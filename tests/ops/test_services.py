"""The services CI provides are really used: PostgreSQL for the suite, Redis for shared state."""

from __future__ import annotations

import os

import pytest
from django.conf import settings
from django.core.cache import cache

from tests.support.factories import record
from tests.support.services import need_service


def test_it_runs_the_suite_on_postgresql_when_services_are_required(postgres):
    with postgres.cursor() as cursor:
        cursor.execute("SHOW server_version")
        assert int(cursor.fetchone()[0].split(".")[0]) >= 13


@pytest.mark.django_db
def test_it_counts_the_rate_limit_in_redis_so_every_web_process_shares_it(alice):
    redis_url = os.environ.get("REDIS_URL")
    need_service(
        bool(redis_url) and settings.CACHES["default"]["BACKEND"].endswith("RedisCache"),
        "Redis (set REDIS_URL)",
    )
    import redis

    cache.clear()
    client = redis.Redis.from_url(redis_url)
    response = alice.client().post("/api/v1/records", record(), format="json")
    assert response.status_code == 200
    counters = [k for k in client.keys("*") if b"rate:" in k]
    assert counters, "the request counter is not in Redis"
    assert int(client.get(counters[0])) == 1

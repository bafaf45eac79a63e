"""Each process keeps a project's price overrides for PRICE_OVERRIDE_CACHE_SECONDS, and a
changed override prices again what was stored with the old ones meanwhile."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import requests
from django.db import connection
from django.test.utils import CaptureQueriesContext

from records.models import ApiKey, Project, Record
from tests.support.cost_data import OVERRIDE
from tests.support.factories import record
from tests.support.live import product, wait_until
from tests.support.services import need_service


def model_call(n: int) -> dict:
    return record(
        "model_call",
        ts="2026-11-20T09:00:00Z",
        data={"model": "claude-sonnet-4-5", "usage": {"input": 1000 + n, "output": 100}},
    )


def override_reads(queries) -> int:
    return sum("records_priceoverride" in q["sql"] for q in queries)


@pytest.mark.both_dbs
@pytest.mark.parametrize(("ttl", "reads"), [(0, 3), (60, 1)])
def test_a_process_reads_the_overrides_once_per_cache_life(alice, settings, ttl, reads):
    settings.DECISIONBOARD = {**settings.DECISIONBOARD, "PRICE_OVERRIDE_CACHE_SECONDS": ttl}
    with CaptureQueriesContext(connection) as queries:
        for n in range(3):
            posted = alice.client().post(
                "/api/v1/records", {"records": [model_call(n)]}, format="json"
            )
            assert posted.status_code == 200, posted.content
    assert override_reads(queries) == reads


def test_records_priced_with_a_kept_override_are_priced_again(tmp_path: Path, transactional_db):
    redis_url = os.environ.get("REDIS_URL")
    need_service(bool(redis_url), "Redis (set REDIS_URL)")
    project = Project.objects.create(name="acme")
    ingest_key = ApiKey.issue(project, ApiKey.Scope.INGEST)[1]
    all_key = ApiKey.issue(project, ApiKey.Scope.ALL)[1]
    os.environ["DECISIONBOARD_PRICE_OVERRIDE_CACHE_SECONDS"] = "3"
    try:
        with product(tmp_path, redis_url) as base:

            def post(path: str, key: str, body: dict) -> requests.Response:
                return requests.post(
                    f"{base}{path}",
                    json=body,
                    headers={"Authorization": f"Bearer {key}"},
                    timeout=30,
                )

            assert post("/api/v1/records", ingest_key, {"records": [model_call(0)]}).ok
            # The web process now keeps "no overrides" for three seconds: the override below
            # is not in force for the records posted right after it.
            assert post("/api/v1/price-overrides", all_key, OVERRIDE).status_code == 201
            assert post("/api/v1/records", ingest_key, {"records": [model_call(1)]}).ok
            sources = sorted(Record.objects.values_list("cost_source", flat=True))
            assert sources == ["genai-prices", "genai-prices"]
            started = time.monotonic()
            wait_until(
                lambda: set(Record.objects.values_list("cost_source", flat=True)) == {"override"},
                60,
                "the records priced again",
            )
            # Not before every process has read the overrides again.
            assert time.monotonic() - started > 2
    finally:
        del os.environ["DECISIONBOARD_PRICE_OVERRIDE_CACHE_SECONDS"]
    # 1,000 and 1,001 input tokens at $2.5 and 100 output at $12 per million.
    assert sorted(Record.objects.values_list("cost_nano", flat=True)) == [3_700_000, 3_702_500]

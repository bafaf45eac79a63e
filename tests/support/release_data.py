"""Two releases of one agent's picks, posted and folded: the corpus of the comparison tests."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from records import catchup
from tests.support.factories import record

DAY_1 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
DAY_2 = datetime(2026, 11, 9, 9, 0, tzinfo=UTC)


def picks(release: str, start: datetime, n: int, errors: int, agent: str = "support-bot"):
    """`n` picks of `release`, `errors` of them pick errors, one a run; every latency alike, so
    that only the pick error rate differs between two such sets."""
    out = []
    for i in range(n):
        ts = (start + timedelta(seconds=i)).isoformat().replace("+00:00", "Z")
        common = {"run_id": f"{release}-{agent}-{i}", "ts": ts, "agent": agent,
                  "release": release}  # fmt: skip
        if i < errors:
            body = record("tool_choice.pick_error", **common)
            body["data"].pop("narrowedSkipped")
            body["data"]["latencyMs"] = 140.5
            body["data"]["classifier"] = {"name": "anthropic", "model": "qwen3-8b"}
        else:
            body = record("tool_choice.pick", **common)
            body["data"]["classifier"] = {"name": "anthropic", "model": "qwen3-8b"}
        out.append(body)
    return out


def post_all(client, records: list[dict]) -> None:
    for at in range(0, len(records), 1000):
        response = client.post(
            "/api/v1/records",
            data=json.dumps({"records": records[at : at + 1000]}),
            content_type="application/json",
        )
        assert response.status_code == 200, response.content
    catchup.catch_up()

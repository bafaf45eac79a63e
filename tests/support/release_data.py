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


def ladders(release: str, start: datetime, n: int, timeouts: int, parse_errors: int,
            agent: str = "support-bot") -> list[dict]:  # fmt: skip
    """`n` classifications of `release`, one a run: `timeouts` of them walk on to rung 1 after the
    seat timed out, the next `parse_errors` after it answered what could not be parsed, the rest
    ruled by the seat."""
    out = []
    for i in range(n):
        ts = start + timedelta(seconds=i)
        common = {"run_id": f"{release}-{agent}-ladder-{i}", "agent": agent, "release": release}
        seat = {"toolName": "send_email", "toolCallId": "call-1", "model": "qwen3-8b",
                "seatModel": "qwen3-8b", "rung": 0, "seat": "off", "reask": False,
                "station": "leg", "wallMs": 300.0}  # fmt: skip
        if i < timeouts:
            first = {**seat, "outcome": "unavailable", "cause": "timeout", "disposition": "asked"}
        elif i < timeouts + parse_errors:
            first = {**seat, "outcome": "parse_error", "form": "missing"}
        else:
            first = {**seat, "outcome": "ruled", "verdict": "allow"}
        out.append(record("classifier.verdict", ts=_iso(ts), data=first, **common))
        if i < timeouts + parse_errors:
            main = {**seat, "model": "claude-sonnet-4-5", "rung": 1, "outcome": "ruled",
                    "verdict": "allow"}  # fmt: skip
            out.append(record("classifier.verdict", ts=_iso(ts + timedelta(milliseconds=500)),
                              data=main, **common))  # fmt: skip
    return out


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def post_all(client, records: list[dict]) -> None:
    for at in range(0, len(records), 1000):
        response = client.post(
            "/api/v1/records",
            data=json.dumps({"records": records[at : at + 1000]}),
            content_type="application/json",
        )
        assert response.status_code == 200, response.content
    catchup.catch_up()

"""One valid record of every kind, built in code so each test can bend one field."""

from __future__ import annotations

import copy
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

_counter = itertools.count()

BASE_TS = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)

DATA: dict[str, dict[str, Any]] = {
    "tool_choice.pick": {
        "iteration": 0,
        "source": "classifier",
        "classifier": {"name": "anthropic", "model": "claude-haiku-4-5"},
        "offered": ["search_docs", "read_file", "write_file", "grep"],
        "ranked": [{"name": "search_docs", "score": 0.6}, {"name": "grep", "score": 0.3}],
        "chosen": "search_docs",
        "confidence": 0.6,
        "usage": {"inputTokens": 800, "outputTokens": 9},
        "latencyMs": 140.5,
        "served": ["search_docs", "grep", "read_skill", "present"],
        "narrowed": True,
    },
    "tool_choice.pick_error": {
        "iteration": 1,
        "classifier": {"name": "anthropic"},
        "status": 529,
        "message": "overloaded",
        "latencyMs": 2400.0,
        "served": ["search_docs", "grep", "read_skill"],
        "narrowedSkipped": "unavailable",
    },
    "tool_choice.outcome": {"iteration": 0, "called": ["search_docs"], "firstAgrees": True},
    "model_selection": {
        "step": 0,
        "default_model": "claude-sonnet-4-5",
        "selected_model": "claude-sonnet-4-5",
        "action": "continue",
        "retry": False,
    },
    "turn": {
        "protocol": "hybrid",
        "text": "Let me search.",
        "toolCalls": [{"name": "search-docs", "arguments": {"query": "refunds"}}],
        "toolNameMap": {"search-docs": "search_docs"},
        "finishReason": "tool_calls",
        "durationMs": 1200.0,
    },
    "classifier.verdict": {
        "toolName": "send_email",
        "toolCallId": "call-1",
        "model": "qwen3-8b",
        "seatModel": "qwen3-8b",
        "rung": 0,
        "seat": "off",
        "reask": False,
        "outcome": "ruled",
        "verdict": "allow",
        "station": "leg",
        "wallMs": 300.0,
    },
    "notice": {
        "code": "classifier.contract_broken",
        "level": "warn",
        "audience": "operator",
        "message": "qwen3-8b broke the verdict contract 2 times in a row",
        "detail": {"model": "qwen3-8b", "streak": 2},
    },
    "provider.error": {
        "error": "UnsupportedToolChoiceError",
        "provider": "anthropic",
        "model": "claude-opus-5-5",
        "retryable": False,
        "toolChoice": {"type": "tool", "name": "present"},
    },
    "reliability": {"type": "circuit_changed", "state": "open", "providerName": "openai"},
    "model_call": {
        "iteration": 0,
        "provider": "anthropic",
        "model": "claude-sonnet-4-5",
        "usage": {"input": 5000, "output": 300, "cacheRead": 4000},
        "stopReason": "toolUse",
        "durationMs": 1800.0,
    },
}
KINDS = tuple(DATA)


def record(kind: str = "model_selection", *, data: dict | None = None, **envelope: Any) -> dict:
    """A valid record of `kind`; `data` entries and envelope fields override the defaults."""
    body = copy.deepcopy(DATA[kind])
    body.update(data or {})
    n = next(_counter)
    out = {
        "id": f"rec-{n}",
        "kind": kind,
        "run_id": "run-1",
        "ts": (BASE_TS + timedelta(milliseconds=n)).isoformat().replace("+00:00", "Z"),
        "agent": "support-bot",
        "session_id": "sess-1",
        "data": body,
    }
    out.update(envelope)
    return {k: v for k, v in out.items() if v is not None}

"""A corpus of records with usage, for the cost tests: model calls with and without cached
and reasoning tokens from several providers, picks with and without the classifier's usage,
turns with and without a reported totalCost, and calls of a model no price list knows.
Spread over three hours, two agents and a dozen runs."""

from __future__ import annotations

import random
from datetime import timedelta

from records import catchup
from tests.support.factories import BASE_TS, record

# (provider, model) of the main model's calls; the last is priced nowhere.
CALL_MODELS = (
    ("anthropic", "claude-sonnet-4-5"),
    ("openai", "gpt-4o"),
    ("openai", "gpt-4o-mini"),
    ("inhouse", "inhouse-coder-7b"),
)
CLASSIFIER_MODELS = ("claude-haiku-4-5", "gpt-4o-mini")
UNKNOWN_MODEL = "inhouse-coder-7b"
AGENTS = ("support-bot", "billing-bot")
SPAN = timedelta(hours=3)


def build(n: int = 240, *, seed: int = 11, start=BASE_TS) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ts = start + timedelta(seconds=rng.uniform(0, SPAN.total_seconds()))
        agent = AGENTS[i % 2]
        envelope = {
            "ts": ts.isoformat().replace("+00:00", "Z"),
            "agent": agent,
            "run_id": f"{agent}-run-{rng.randrange(6)}",
        }
        roll = rng.random()
        if roll < 0.55:
            provider, model = rng.choice(CALL_MODELS)
            usage = {"input": rng.randrange(100, 20_000), "output": rng.randrange(10, 2_000)}
            if rng.random() < 0.5:
                usage["cacheRead"] = rng.randrange(0, 30_000)
            if rng.random() < 0.3:
                usage["cacheWrite"] = rng.randrange(0, 5_000)
            if rng.random() < 0.3:
                usage["thinking"] = rng.randrange(0, 3_000)
            data = {"provider": provider, "model": model, "usage": usage}
            out.append(record("model_call", data=data, **envelope))
        elif roll < 0.85:
            pick = record("tool_choice.pick", **envelope)
            pick["data"]["classifier"]["model"] = rng.choice(CLASSIFIER_MODELS)
            if rng.random() < 0.2:
                del pick["data"]["usage"]  # a pick that reports no usage costs nothing known
            else:
                pick["data"]["usage"] = {
                    "inputTokens": rng.randrange(200, 3_000),
                    "outputTokens": rng.randrange(1, 40),
                }
            out.append(pick)
        else:
            turn = record("turn", **envelope)
            if rng.random() < 0.7:
                turn["data"]["totalCost"] = round(rng.uniform(0.001, 0.2), 6)
            out.append(turn)
    return out


OVERRIDE = {
    "model": "claude-sonnet-4-5",
    "provider": "anthropic",
    "effective_from": "2026-11-01T00:00:00Z",
    "input_per_mtok": 2.5,
    "output_per_mtok": 12,
}


def ingest_shuffled(persona, records, *, passes_every=2):
    shuffled = records[:]
    random.Random(2).shuffle(shuffled)
    client = persona.client()
    for i, start in enumerate(range(0, len(shuffled), 60)):
        response = client.post(
            "/api/v1/records", {"records": shuffled[start : start + 60]}, format="json"
        )
        assert response.status_code == 200, response.content
        if i % passes_every == 1:
            catchup.run_pass(100)
    catchup.catch_up()

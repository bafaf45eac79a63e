"""What the records of tests/support/cost_data.py cost, priced straight from the records' JSON: with
genai-prices' own calc_price at each record's ts, or the override in force then, or the cost
the turn reported. Independent of records.contract.cost and of the catch-up."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

import genai_prices

from records.contract.buckets import truncate


@dataclass(frozen=True)
class OracleOverride:
    model: str
    provider: str  # "" for any
    effective_from: datetime
    input: Decimal
    output: Decimal
    cache_read: Decimal
    cache_write: Decimal


def ts_of(record: dict) -> datetime:
    return datetime.fromisoformat(record["ts"].replace("Z", "+00:00"))


def usd(record: dict, overrides: list[OracleOverride]) -> float | None | bool:
    """The record's cost in USD; None when it has usage and no known price; False when it has
    no usage at all."""
    data, kind, ts = record["data"], record["kind"], ts_of(record)
    if kind == "turn":
        return data["totalCost"] if "totalCost" in data else False
    if kind == "tool_choice.pick":
        if "usage" not in data:
            return False
        model, provider = data["classifier"]["model"], None
        fresh, cache_read, cache_write = data["usage"]["inputTokens"], 0, 0
        output = data["usage"]["outputTokens"]
    else:
        model, provider, u = data["model"], data["provider"], data["usage"]
        fresh, cache_read, cache_write = u["input"], u.get("cacheRead", 0), u.get("cacheWrite", 0)
        output = u["output"] + u.get("thinking", 0)
    override = _override(model, provider, ts, overrides)
    if override is not None:
        total = (
            fresh * override.input
            + output * override.output
            + cache_read * override.cache_read
            + cache_write * override.cache_write
        )
        return float(total / 1_000_000)
    usage = genai_prices.Usage(
        input_tokens=fresh + cache_read + cache_write,
        output_tokens=output,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )
    try:
        found = genai_prices.calc_price(
            usage, model, provider_id=provider, genai_request_timestamp=ts
        )
    except LookupError:
        try:  # the provider as named is unknown: any provider that prices the model
            found = genai_prices.calc_price(usage, model, genai_request_timestamp=ts)
        except LookupError:
            return None
    return float(found.total_price)


def _override(model, provider, ts, overrides):
    fitting = [
        o
        for o in overrides
        if o.model == model
        and o.effective_from <= ts
        and (not o.provider or o.provider == provider)
    ]
    return max(fitting, key=lambda o: (bool(o.provider), o.effective_from), default=None)


def group_of(record: dict, by: str) -> str:
    data = record["data"]
    if by == "agent":
        return record["agent"]
    if by == "kind":
        return record["kind"]
    if by == "provider":
        return data["provider"] if record["kind"] == "model_call" else ""
    if record["kind"] == "tool_choice.pick":
        return data["classifier"]["model"]
    return data.get("model", "") if record["kind"] == "model_call" else ""


def totals(records, overrides, by: str, grain: str | None = None) -> dict:
    """{(bucket, group) or group: [usd, records with usage, unknown]}."""
    out: dict = defaultdict(lambda: [0.0, 0, 0])
    for record in records:
        cost = usd(record, overrides)
        if cost is False:
            continue
        group = group_of(record, by)
        key = (truncate(ts_of(record), grain), group) if grain else group
        out[key][1] += 1
        if cost is None:
            out[key][2] += 1
        else:
            out[key][0] += cost
    return dict(out)


def by_run(records, overrides) -> dict[str, list]:
    """{run_id: [usd, unknown]} of the runs with usage."""
    out: dict = defaultdict(lambda: [0.0, 0])
    for record in records:
        cost = usd(record, overrides)
        if cost is False:
            continue
        if cost is None:
            out[record["run_id"]][1] += 1
        else:
            out[record["run_id"]][0] += cost
    return dict(out)

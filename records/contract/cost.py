"""What a record cost: its token usage priced in USD (docs/architecture.md, "Cost").

Pure functions over plain data: the usage a record reports (records.contract.derive sets it), the
price overrides of its project (records.models.PriceOverride, passed in as `Override`s) and the
prices genai-prices ships with the installed package. A cost is held in nano-USD (an integer),
so that sums in rollups are exact whatever their order.

A price is chosen, in order: a cost the agent reported (a turn's `totalCost`), the project's
override of the model in force at the record's `ts`, genai-prices' price of the model at `ts`
(prices change over time). A record with usage and none of these is `unknown`, with a reason:
never a silent zero.
"""

from __future__ import annotations

import copy
import functools
import importlib.metadata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from genai_prices import Usage as PricesUsage
from genai_prices import data_snapshot
from genai_prices import types as price_types

NANO_PER_USD = 1_000_000_000
REPORTED = "reported"
GENAI_PRICES = "genai-prices"
OVERRIDE = "override"
UNKNOWN = "unknown"
SOURCES = (REPORTED, GENAI_PRICES, OVERRIDE, UNKNOWN)

# Provider names as the GenAI conventions (gen_ai.provider.name) and the frameworks spell them,
# mapped to genai-prices' provider ids where the two differ.
PROVIDER_ALIASES = {
    "gcp.gemini": "google",
    "gcp.gen_ai": "google",
    "gcp.vertex_ai": "google",
    "gemini": "google",
    "vertex_ai": "google",
    "google_genai": "google",
    "aws.bedrock": "aws",
    "bedrock": "aws",
    "azure.ai.openai": "azure",
    "azure.ai.inference": "azure",
    "az.ai.openai": "azure",
    "az.ai.inference": "azure",
    "azure_openai": "azure",
    "mistral_ai": "mistral",
    "mistralai": "mistral",
    "x_ai": "x-ai",
    "xai": "x-ai",
    "ibm.watsonx.ai": "ibm",
}


@dataclass(frozen=True, slots=True)
class Usage:
    """The tokens a record reports, disjoint: `input` excludes the cached input tokens
    (`cache_read`, `cache_write`), `output` excludes `thinking`. `reported_usd` is a cost
    the agent sent itself."""

    model: str | None
    provider: str | None = None
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    thinking: int = 0
    reported_usd: float | None = None


@dataclass(frozen=True, slots=True)
class Override:
    """A project's price of a model from a moment on, in USD per million tokens. An empty
    `provider` matches the model from any provider; a cache price left out is the input price."""

    model: str
    provider: str
    effective_from: datetime
    input_per_mtok: Decimal
    output_per_mtok: Decimal
    cache_read_per_mtok: Decimal | None = None
    cache_write_per_mtok: Decimal | None = None


@dataclass(frozen=True, slots=True)
class Cost:
    nano: int | None
    source: str
    reason: str | None = None

    @property
    def usd(self) -> float | None:
        return None if self.nano is None else self.nano / NANO_PER_USD

    def as_derived(self) -> dict:
        """`derived.cost` as the API shows it."""
        out: dict = {"usd": self.usd, "source": None if self.source == UNKNOWN else self.source}
        if self.reason:
            out["reason"] = self.reason
        return out


def price(usage: Usage, ts: datetime, overrides: Sequence[Override] = ()) -> Cost:
    """The cost of `usage` made at `ts`, from the first source that knows it."""
    if usage.reported_usd is not None:
        return Cost(round(usage.reported_usd * NANO_PER_USD), REPORTED)
    if not usage.model:
        return Cost(None, UNKNOWN, "the record names no model")
    if not overrides:
        # Most calls are of a model whose price does not change over time: once found, it needs
        # no lookup (ingest prices every model call).
        steady = _STEADY.get((usage.provider, usage.model))
        if steady is not None and steady[0] is data_snapshot.get_snapshot():
            rates = _rates_for(steady[1], usage.input + usage.cache_read + usage.cache_write)
            return Cost(_nano(usage, rates), GENAI_PRICES)
    override = _override_at(usage, ts, overrides)
    if override is not None:
        return Cost(_override_nano(usage, override), OVERRIDE)
    nano = _library_nano(usage, ts)
    if nano is None:
        where = f" from provider {usage.provider!r}" if usage.provider else ""
        return Cost(None, UNKNOWN, f"no price known for model {usage.model!r}{where}")
    return Cost(nano, GENAI_PRICES)


def describe(nano: int | None, source: str | None, usage_model: str | None) -> dict | None:
    """`derived.cost` of a stored record from its cost columns (None: it had no usage)."""
    if source is None:
        return None
    if source != UNKNOWN:
        return Cost(nano, source).as_derived()
    reason = (
        f"no price known for model {usage_model!r}" if usage_model else "the record names no model"
    )
    return Cost(None, UNKNOWN, reason).as_derived()


def snapshot_label() -> str:
    """Which prices genai-prices holds: the package's own snapshot (its version), or the
    time of the last fetch when fetching is on (DECISIONBOARD_PRICES_UPDATE)."""
    snapshot = data_snapshot.get_snapshot()
    version = importlib.metadata.version("genai-prices")
    if snapshot.from_auto_update:
        return f"genai-prices {version}, fetched {snapshot.timestamp:%Y-%m-%d %H:%M} UTC"
    return f"genai-prices {version} (the snapshot the package ships)"


# --- overrides --------------------------------------------------------------------------------
def _override_at(usage: Usage, ts: datetime, overrides: Sequence[Override]) -> Override | None:
    """The override of the usage's model in force at `ts`: the latest that started by then,
    one naming the provider before one for any provider."""
    best: Override | None = None
    for each in overrides:
        if each.model != usage.model or each.effective_from > ts:
            continue
        if each.provider and each.provider != usage.provider:
            continue
        if best is None or (bool(each.provider), each.effective_from) > (
            bool(best.provider),
            best.effective_from,
        ):
            best = each
    return best


def _override_nano(usage: Usage, o: Override) -> int:
    cache_read = o.cache_read_per_mtok if o.cache_read_per_mtok is not None else o.input_per_mtok
    cache_write = o.cache_write_per_mtok if o.cache_write_per_mtok is not None else o.input_per_mtok
    # USD per million tokens is nano-USD per thousand tokens.
    total = (
        usage.input * o.input_per_mtok
        + (usage.output + usage.thinking) * o.output_per_mtok
        + usage.cache_read * cache_read
        + usage.cache_write * cache_write
    ) * 1000
    return round(total)


# --- genai-prices -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _UnitRates:
    """nano-USD per token of each kind, from one ModelPrice (linear: no tiers)."""

    input: float
    output: float
    cache_read: float
    cache_write: float


def _library_nano(usage: Usage, ts: datetime) -> int | None:
    snapshot = data_snapshot.get_snapshot()
    found = _find_model(usage.provider, usage.model, id(snapshot))
    if found is None:
        return None
    provider, model = found
    rates = _rates_for(model.get_prices(ts), usage.input + usage.cache_read + usage.cache_write)
    if isinstance(model.prices, price_types.ModelPrice):
        _STEADY[(usage.provider, usage.model)] = (snapshot, model.prices)
    return _nano(usage, rates)


def _nano(usage: Usage, rates: _UnitRates) -> int:
    return round(
        usage.input * rates.input
        + (usage.output + usage.thinking) * rates.output
        + usage.cache_read * rates.cache_read
        + usage.cache_write * rates.cache_write
    )


# (provider, model) as records name them -> (the snapshot, the price) of a model with one price
# for all time.
_STEADY: dict[tuple[str | None, str], tuple[object, price_types.ModelPrice]] = {}


@functools.lru_cache(maxsize=4096)
def _find_model(
    provider: str | None, model: str, snapshot_id: int
) -> tuple[price_types.Provider, price_types.ModelInfo] | None:
    """genai-prices' provider and model for a record's names: the provider as named (or its
    alias), else whichever provider the library finds by the model name alone. Cached per
    snapshot: a fetch (DECISIONBOARD_PRICES_UPDATE) brings a new one."""
    snapshot = data_snapshot.get_snapshot()
    name = provider.lower() if provider else None
    candidates = [PROVIDER_ALIASES.get(name, name)] if name else []
    candidates.append(None)
    for provider_id in candidates:
        try:
            return snapshot.find_provider_model(model, None, provider_id, None)
        except LookupError:
            continue
    return None


# (id of a ModelPrice, the tier of each tiered price) -> (the ModelPrice, its rates). The
# ModelPrice is held so that its id is never reused by another while the entry lives.
_RATES: dict[tuple, tuple[price_types.ModelPrice, _UnitRates]] = {}
# id of a ModelPrice -> (the ModelPrice, its tiered prices by field name).
_TIERED: dict[int, tuple[price_types.ModelPrice, list]] = {}


def _rates_for(model_price: price_types.ModelPrice, input_tokens: int) -> _UnitRates:
    """The per-token rates of a price for a call of `input_tokens` (cached ones included): a
    tiered price charges every token at the tier the call's input reaches (genai-prices'
    calc_unit_price), so each tier gets rates of its own."""
    known = _TIERED.get(id(model_price))
    if known is None or known[0] is not model_price:
        fields = vars(model_price).items()
        known = _TIERED[id(model_price)] = (
            model_price,
            [(k, v) for k, v in fields if isinstance(v, price_types.TieredPrices)],
        )
    tiered = known[1]
    tiers = tuple(_tier_of(v, input_tokens) for _, v in tiered) if tiered else ()
    key = (id(model_price), tiers)
    cached = _RATES.get(key)
    if cached is not None and cached[0] is model_price:
        return cached[1]
    flat = copy.copy(model_price)
    flat.__dict__.update(
        {
            k: v.base if tier < 0 else v.tiers[tier].price
            for (k, v), tier in zip(tiered, tiers, strict=True)
        }
    )
    rates = _unit_rates(flat)
    _RATES[key] = (model_price, rates)
    return rates


def _tier_of(price: price_types.TieredPrices, input_tokens: int) -> int:
    """The index of the highest tier whose start the input passes; -1 for the base price."""
    for i in range(len(price.tiers) - 1, -1, -1):
        if input_tokens > price.tiers[i].start:
            return i
    return -1


def _unit_rates(model_price: price_types.ModelPrice) -> _UnitRates:
    # The library's own arithmetic on one million tokens of each kind (a price with no tiers
    # left), so that its rules (a cache price missing, cached tokens counted within the input)
    # hold here too.
    million = 1_000_000

    def per_token(**tokens: int) -> float:
        usd = model_price.calc_price(PricesUsage(**tokens))["total_price"]
        return float(usd) * NANO_PER_USD / million

    return _UnitRates(
        input=per_token(input_tokens=million),
        output=per_token(output_tokens=million),
        cache_read=per_token(input_tokens=million, cache_read_tokens=million),
        cache_write=per_token(input_tokens=million, cache_write_tokens=million),
    )

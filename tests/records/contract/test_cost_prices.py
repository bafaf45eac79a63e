"""records.contract.cost against genai-prices' own calc_price: every model, tier and date."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from genai_prices import Usage as PricesUsage
from genai_prices import calc_price
from hypothesis import given, settings
from hypothesis import strategies as st

from records.contract import cost

# Models with flat prices, and models whose price rises past 200,000 input tokens.
MODELS = [
    ("gpt-4o-mini", "openai"),
    ("gpt-5", None),
    ("claude-haiku-4-5", "anthropic"),
    ("claude-sonnet-4-5", "anthropic"),
    ("gemini-2.5-pro", "gcp.vertex_ai"),
    ("gemini-2.5-flash", "google"),
]
TOKENS = st.sampled_from([0, 1, 10, 5_000, 150_000, 199_999, 200_000, 200_001, 400_000])


def library_nano(usage: cost.Usage, ts: datetime) -> Decimal:
    provider = cost.PROVIDER_ALIASES.get(usage.provider, usage.provider)
    priced = calc_price(
        PricesUsage(
            input_tokens=usage.input + usage.cache_read + usage.cache_write,
            output_tokens=usage.output + usage.thinking,
            cache_read_tokens=usage.cache_read or None,
            cache_write_tokens=usage.cache_write or None,
        ),
        model_ref=usage.model,
        provider_id=provider,
        genai_request_timestamp=ts,
    )
    return priced.total_price * cost.NANO_PER_USD


@settings(max_examples=400, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    tokens=st.tuples(TOKENS, st.integers(0, 9_000), TOKENS, st.sampled_from([0, 50, 3_000])),
    thinking=st.sampled_from([0, 30]),
    month=st.integers(1, 12),
)
def test_it_prices_as_the_library_does(model, tokens, thinking, month):
    name, provider = model
    fresh, output, cache_read, cache_write = tokens
    usage = cost.Usage(name, provider, fresh, output, cache_read, cache_write, thinking)
    ts = datetime(2026, month, 1, tzinfo=UTC)
    got = cost.price(usage, ts)
    assert got.source == cost.GENAI_PRICES
    assert abs(got.nano - library_nano(usage, ts)) <= 1


def test_a_call_past_a_tier_pays_the_tier_for_every_token():
    ts = datetime(2026, 11, 1, tzinfo=UTC)
    below = cost.price(cost.Usage("claude-sonnet-4-5", "anthropic", 200_000, 0), ts)
    above = cost.price(cost.Usage("claude-sonnet-4-5", "anthropic", 200_001, 0), ts)
    assert above.nano > below.nano * 1.5
    assert above.nano == round(
        library_nano(cost.Usage("claude-sonnet-4-5", "anthropic", 200_001), ts)
    )


def test_an_unknown_model_has_no_price_and_says_why():
    got = cost.price(
        cost.Usage("house-model-7", "openai", 10, 10), datetime(2026, 11, 1, tzinfo=UTC)
    )
    assert (got.nano, got.source) == (None, cost.UNKNOWN)
    assert got.reason == "no price known for model 'house-model-7' from provider 'openai'"
    assert got.as_derived() == {"usd": None, "source": None, "reason": got.reason}


def test_a_reported_cost_wins_over_any_price():
    got = cost.price(cost.Usage(None, reported_usd=0.25), datetime(2026, 11, 1, tzinfo=UTC))
    assert (got.nano, got.source, got.usd) == (250_000_000, cost.REPORTED, 0.25)

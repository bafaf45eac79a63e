"""What the operator pages say a decision cost: the runs list, the sessions, a run's timeline,
the overview, the models page and the narrowing what-if (docs/architecture.md, "Pages").

Records go in through the ingest API, which prices them (records.contract.cost), and the
workers' catch-up pass, which adds the costs up into rollups and run summaries. A project's own
price of a model (records.models.PriceOverride) makes every amount here known exactly.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal
from html import unescape

import pytest
from django.utils import timezone

from dashboard import formatting
from records import catchup
from records.models import PriceOverride, Run
from tests.support.factories import record
from tests.support.pages import (
    EVIL_TEXT,
    cells,
    decisions,
    figure,
    narrowing_page,
    operator,
    post,
    recent,
)

pytestmark = pytest.mark.both_dbs

# $1 per million input tokens (cached ones too) and $2 per million output: a factory model
# call (5,000 + 4,000 cached in, 300 out) costs $0.0096.
CALL_NANO = 9_600_000


@pytest.fixture
def alice_page(alice):
    return operator("alice", alice)


def house_price(persona, model: str = "house-model") -> None:
    PriceOverride.objects.get_or_create(
        project=persona.project,
        model=model,
        provider="",
        effective_from=datetime(2020, 1, 1, tzinfo=UTC),
        defaults={"input_per_mtok": Decimal(1), "output_per_mtok": Decimal(2)},
    )


def priced_run(persona, run_id: str = "run-cost", session_id: str = "sess-cost") -> None:
    """Two calls at the house price, one of a model without a price, a turn that reported its
    cost, and a selection without usage."""
    house_price(persona)
    envelope = {"run_id": run_id, "session_id": session_id}
    post(
        persona,
        [
            record("model_selection", ts=recent(0), **envelope),
            record("model_call", ts=recent(1), data={"model": "house-model"}, **envelope),
            record("model_call", ts=recent(2), data={"model": "house-model"}, **envelope),
            record(
                "model_call",
                ts=recent(3),
                data={"model": EVIL_TEXT, "provider": "acme", "iteration": 1},
                **envelope,
            ),
            record("turn", ts=recent(4), data={"totalCost": 0.0123}, **envelope),
        ],
    )
    catchup.catch_up()


# --- amounts as they read -------------------------------------------------------------------------
def test_it_writes_amounts_so_that_a_cheap_call_never_reads_zero():
    assert [formatting.usd(n) for n in (None, 0, 12_345_678_900, 12_345_678, 12_345, 9)] == [
        "—", "$0.00", "$12.35", "$0.0123", "$0.000012", "$0.0000000090"
    ]  # fmt: skip
    assert formatting.unpriced_cost(12_300_000, 2) == "$0.0123 + 2 unpriced"
    assert formatting.unpriced_cost(0, 3) == "3 unpriced"
    assert formatting.unpriced_cost(0, 0) == "—"
    assert formatting.unknown_share(1, 32) == "3.1 % of records with usage have no known price"


# --- runs, sessions, a run's timeline -------------------------------------------------------------
def test_it_shows_each_runs_cost_with_its_unpriced_records(alice, alice_page):
    priced_run(alice)
    run = Run.objects.get(project=alice.project, run_id="run-cost")
    # Two calls at the house price and the turn's reported $0.0123; the third call has no price.
    assert (run.cost_nano, run.cost_unknown) == (2 * CALL_NANO + 12_300_000, 1)
    page = alice_page.get("/runs/").content.decode()
    assert '<td class="num cost">$0.0315 + 1 unpriced</td>' in page
    overview = alice_page.get("/").content.decode()
    assert '<td class="num cost">$0.0315 + 1 unpriced</td>' in overview


def test_it_adds_up_a_sessions_runs(alice, alice_page):
    priced_run(alice, "run-1", "sess-cost")
    priced_run(alice, "run-2", "sess-cost")
    page = alice_page.get("/sessions/").content.decode()
    assert '<td class="num cost">$0.0630 + 2 unpriced</td>' in page
    session = alice_page.get("/sessions/sess-cost/").content.decode()
    assert "<dd data-cost>$0.0630 + 2 unpriced</dd>" in session
    assert session.count('<td class="num cost">$0.0315 + 1 unpriced</td>') == 2


def test_it_shows_each_calls_cost_and_why_a_price_is_unknown(alice, alice_page):
    priced_run(alice)
    page = alice_page.get("/runs/run-cost/").content.decode()
    costs = re.findall(r"<dt>cost</dt><dd>(.*?)</dd>", page)
    assert [unescape(c) for c in costs] == [
        "$0.0096 (project price)",
        "$0.0096 (project price)",
        f"unknown price: no price known for model {EVIL_TEXT!r}",
        "$0.0123 (reported by the agent)",
    ]
    # The model's name is the agent's text: escaped, never markup.
    assert EVIL_TEXT not in page


def test_a_run_page_reads_no_more_for_its_costs(alice, alice_page, django_assert_num_queries):
    priced_run(alice)
    # session, user, projects, the run, its records, its sub-runs
    with django_assert_num_queries(6):
        assert alice_page.get("/runs/run-cost/").status_code == 200


def calls(persona, model: str, n: int, *, tools: bool = True) -> None:
    """n calls whose prompt is 1,000 tokens, 250 per tool definition and 100 per message."""
    out = []
    for i in range(n):
        served, messages = 2 + 2 * (i % 2), 2 + i
        data = {"model": model, "usage": {"input": 1000 + 250 * served + 100 * messages,
                                          "output": 10}}  # fmt: skip
        if tools:
            data.update(toolsCount=served, messagesCount=messages)
        out.append(record("model_call", data=data, run_id=f"run-c{i}", ts=recent(i)))
    post(persona, out)


def test_it_says_what_each_top_n_would_save_in_tokens_and_money(alice, alice_page):
    PriceOverride.objects.create(
        project=alice.project, model="house-model", effective_from=datetime(2020, 1, 1, tzinfo=UTC),
        input_per_mtok=Decimal(10), output_per_mtok=Decimal(20),
    )  # fmt: skip
    decisions(alice, 10)
    calls(alice, "house-model", 30)
    calls(alice, "mystery-model-9", 30)
    catchup.catch_up()
    page = narrowing_page(alice_page)
    # top N, miss rate, tools served, definitions saved, tokens saved, spend saved: 10 decisions
    # save 3, 2, 2, 0 definitions each; 250 tokens a definition at $10 per million tokens.
    assert [row[:1] + row[3:] for row in cells(page, "whatif")] == [
        ["1", "30", "7,500", "$0.0750"],
        ["2", "20", "5,000", "$0.0500"],
        ["3", "20", "5,000", "$0.0500"],
        ["4", "0", "0", "$0.00"],
    ]
    assert cells(page, "whatif-definition-costs") == [
        ["anthropic", "house-model", "30", "250", "$2.50"],
        ["anthropic", "mystery-model-9", "30", "250", "not estimated: no known input price"],
    ]
    assert "(50.0 % of them)" in page
    assert "genai-prices" in page  # the price snapshot the estimate used


def test_it_says_not_estimated_rather_than_zero(alice, alice_page):
    decisions(alice, 10)
    calls(alice, "claude-sonnet-4-5", 30, tools=False)
    catchup.catch_up()
    page = narrowing_page(alice_page)
    rows = cells(page, "whatif")
    assert [row[3:] for row in rows][0] == ["30", "not estimated", "not estimated"]
    assert "No model call of this period reports <code>toolsCount</code>: savings not" in page


def test_it_estimates_a_definitions_tokens_only_when_the_calls_show_it():
    from dashboard.queries.tool_definition_cost import MIN_CALLS, Moments, estimate

    exact = [(t, m, 1000 + 250 * t + 100 * m) for t, m in zip([2, 4] * 15, range(30), strict=True)]
    assert round(estimate("p", "m", Moments.of(exact), 1.0).tokens) == 250
    # The same number of tools on every call: nothing to tell a definition's tokens by.
    same = [(3, m, 1000 + 100 * m) for m in range(30)]
    assert (
        estimate("p", "m", Moments.of(same), 1.0).reason
        == "every call carried the same number of tools"
    )
    # Prompt tokens that do not follow the tools served.
    flat = [(t, None, 5000 + (37 * i) % 400) for i, t in enumerate([2, 4, 3] * 10)]
    assert not estimate("p", "m", Moments.of(flat), 1.0).estimated
    few = exact[: MIN_CALLS - 1]
    assert (
        estimate("p", "m", Moments.of(few), 1.0).reason
        == f"{MIN_CALLS - 1} calls report toolsCount, under {MIN_CALLS}"
    )


# --- the overview and the models page -------------------------------------------------------------
def test_the_overview_shows_the_periods_spend_by_model_and_the_unpriced_share(alice, alice_page):
    priced_run(alice)
    page = alice_page.get("/").content.decode()
    kpi = re.search(r'data-kpi="spend">(.*?)</div>\s*</div>', page, re.S)
    assert kpi and "$0.0315" in kpi.group(1)
    # Four records with usage: two priced calls, the turn's report, and one call without a price.
    assert "Spend $0.0315: 25.0 % of records with usage have no known price." in page
    spend = {t["name"]: sum(t["y"]) for t in figure(page, "chart-spend")["data"]}
    assert spend == pytest.approx({"house-model": 0.0192, "(model not reported)": 0.0123})
    assert "genai-prices" in page


def test_the_models_page_shows_spend_by_model_and_provider(alice, alice_page):
    priced_run(alice)
    page = alice_page.get("/models/").content.decode()
    rows = cells(page, "spend-by-model", compact=False)
    assert rows == [
        ["main model", "anthropic", "house-model", "$0.0192", "2", "0"],
        ["turn total (reported)", "—", "(model not reported)", "$0.0123", "1", "0"],
        ["main model", "acme", EVIL_TEXT, "$0.00", "1", "1 (100.0 %)"],
    ]
    assert "Total $0.0315: 25.0 % of records with usage have no known price." in page
    assert EVIL_TEXT not in page


def test_the_pages_spend_is_what_the_cost_metric_answers(alice, alice_page):
    from dashboard.queries import page_rollups

    priced_run(alice)
    priced_run(alice, "run-2", "sess-2")
    start, end = page_rollups.overview_range(timezone.now(), "24h")
    params = {"from": start.isoformat(), "to": end.isoformat(), "interval": "hour"}
    answer = alice.client(alice.read_key).get("/api/v1/metrics/cost", params).json()
    usd = sum(t["value"] or 0 for t in answer["totals"])
    unknown = sum(t["unknown"] for t in answer["totals"])
    count = sum(t["count"] for t in answer["totals"])
    assert (round(usd, 9), unknown, count) == (0.063, 2, 8)
    page = alice_page.get("/", {"period": "24h"}).content.decode()
    assert "Spend $0.0630: 25.0 % of records with usage have no known price." in page

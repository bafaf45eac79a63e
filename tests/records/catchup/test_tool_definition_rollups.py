"""The tokens a tool definition costs a main model, as the narrowing what-if estimates them:
from the TOOL_DEFINITIONS rollups the catch-up keeps (records.contract.rollup_keys), never from
the records (docs/architecture.md, "Guarantees": pages read rollups, never raw records across a
period).

The oracle is scipy's and numpy's least squares over the calls themselves: the rollups keep the
fit's sufficient statistics, so the slope they give is the calls' own, whatever order the calls
arrive in and however often they are folded.
"""

from __future__ import annotations

import io
import random
import re
from datetime import UTC, timedelta

import numpy as np
import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from scipy import stats

from dashboard.queries.tool_definition_cost import (
    MIN_CALLS,
    Moments,
    definition_costs,
    estimate,
    slope,
)
from records import catchup
from records.contract.rollup_keys import TOOL_DEFINITIONS
from records.models import Grain, Record, Rollup
from tests.support.factories import record
from tests.support.pages import cells, decisions, narrowing_page, operator, post

pytestmark = pytest.mark.both_dbs


@pytest.fixture
def alice_page(alice):
    return operator("alice", alice)


def at(minutes: float) -> str:
    t = timezone.now().replace(microsecond=0) - timedelta(hours=3) + timedelta(minutes=minutes)
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def noisy_calls(model: str, n: int, *, messages: bool, seed: int) -> list[dict]:
    """n calls over three hours whose prompt (input plus cached read and written) grows by
    about 180 tokens a definition and 60 a message, with noise; a few carry no toolsCount."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        tools, steps = rng.randint(1, 12), rng.randint(1, 40)
        prompt = 900 + 180 * tools + (60 * steps if messages else 0) + rng.randint(-400, 400)
        cache_read = rng.choice([0, 0, prompt // 3])
        cache_write = rng.choice([0, 0, 0, prompt // 7])
        usage = {"input": prompt - cache_read - cache_write, "output": 40}
        if cache_read:
            usage["cacheRead"] = cache_read
        if cache_write:
            usage["cacheWrite"] = cache_write
        data = {"iteration": i, "provider": "openai", "model": model, "usage": usage,
                "stopReason": "toolUse", "durationMs": 900.0}  # fmt: skip
        if i % 17 != 5:  # a call that does not say what it carried is no point of the fit
            data["toolsCount"] = tools
            if messages:
                data["messagesCount"] = steps
        out.append(record("model_call", data=data, run_id=f"run-{model}-{i % 9}",
                          ts=at(rng.uniform(0, 179)), agent=rng.choice(["a1", "a2"])))  # fmt: skip
    return out


def points(records: list[dict], model: str) -> list[tuple[int, int | None, int]]:
    """(tools, messages or None, prompt tokens) of the model's calls that report toolsCount."""
    out = []
    for r in records:
        d = r["data"]
        if d["model"] == model and "toolsCount" in d:
            u = d["usage"]
            prompt = u["input"] + u.get("cacheRead", 0) + u.get("cacheWrite", 0)
            out.append((d["toolsCount"], d.get("messagesCount"), prompt))
    return out


def estimates(persona) -> dict[str, object]:
    now = timezone.now()
    costs = definition_costs(persona.project.pk, Grain.HOUR, now - timedelta(hours=4), now, [])
    return {c.model: c for c in costs}


def definition_rows(persona) -> list[tuple]:
    return sorted(
        Rollup.objects.filter(project=persona.project, kind=TOOL_DEFINITIONS).values_list(
            "grain", "bucket", "agent", "model", "key", "count", "tokens_in", "latency_sum"
        )
    )


def test_it_estimates_from_rollups_the_least_squares_slope_of_the_calls(alice):
    plain = noisy_calls("gpt-plain", 300, messages=False, seed=3)
    chatty = noisy_calls("gpt-chatty", 300, messages=True, seed=4)
    post(alice, plain + chatty)
    catchup.catch_up()
    got = estimates(alice)

    xs, _, ys = zip(*points(plain, "gpt-plain"), strict=True)
    fit = stats.linregress(xs, ys)
    assert got["gpt-plain"].calls == len(xs)
    assert got["gpt-plain"].tokens == pytest.approx(fit.slope, rel=1e-9)

    # With messagesCount on every call, the fit holds it apart: numpy's least squares on both.
    xs, zs, ys = zip(*points(chatty, "gpt-chatty"), strict=True)
    regressors = np.column_stack([np.ones(len(xs)), xs, zs])
    coefficients, *_ = np.linalg.lstsq(regressors, np.array(ys, dtype=float), rcond=None)
    assert got["gpt-chatty"].tokens == pytest.approx(coefficients[1], rel=1e-9)
    assert 150 < got["gpt-chatty"].tokens < 210  # near the 180 the calls were made with


def test_its_standard_error_is_the_fits_own():
    """The estimate stands at two standard errors above zero: the error is linregress's."""
    rng = random.Random(7)
    calls = [(t, None, 5000 + 3 * t + rng.randint(-300, 300))
             for t in (rng.randint(1, 9) for _ in range(60))]  # fmt: skip
    xs, _, ys = zip(*calls, strict=True)
    fit = stats.linregress(xs, ys)
    got = estimate("p", "m", Moments.of(calls), 1.0)
    assert slope(Moments.of(calls), with_messages=False) == pytest.approx((fit.slope, fit.stderr))
    assert got.estimated == (fit.slope > 2 * fit.stderr)
    assert not got.estimated  # 3 tokens a definition is lost in 300 of noise
    assert got.reason == "prompt tokens do not rise measurably with the tools served"


def test_it_gives_the_same_estimate_whatever_order_the_calls_arrive_and_fold_in(alice, bob):
    calls = noisy_calls("gpt-plain", 240, messages=True, seed=11)
    xs, zs, ys = zip(*points(calls, "gpt-plain"), strict=True)
    regressors = np.column_stack([np.ones(len(xs)), xs, zs])
    want = np.linalg.lstsq(regressors, np.array(ys, dtype=float), rcond=None)[0][1]

    post(alice, calls)
    catchup.catch_up()
    # Bob's calls come late and shuffled, the newest first, folded a few at a time.
    shuffled = sorted(calls, key=lambda r: r["ts"], reverse=True)
    random.Random(2).shuffle(shuffled[40:])
    for start in range(0, len(shuffled), 60):
        post(bob, shuffled[start : start + 60])
        catchup.catch_up(batch_size=25)
    assert estimates(alice)["gpt-plain"].tokens == pytest.approx(want, rel=1e-9)
    assert estimates(bob)["gpt-plain"].tokens == pytest.approx(want, rel=1e-9)
    rows = definition_rows(bob)
    assert rows and rows == definition_rows(alice)

    # Folded again from the records (manage.py rebuild_rollups): the same rows, not twice them.
    call_command("rebuild_rollups", stdout=io.StringIO())
    assert not definition_rows(bob)
    catchup.catch_up(batch_size=70)
    catchup.catch_up()
    assert definition_rows(bob) == rows
    assert estimates(bob)["gpt-plain"].tokens == pytest.approx(want, rel=1e-9)


def test_the_narrowing_page_reads_no_record_for_its_estimate(alice, alice_page):
    decisions(alice, 10)
    post(alice, noisy_calls("gpt-plain", 120, messages=False, seed=5))
    catchup.catch_up()
    table = Record._meta.db_table
    with CaptureQueriesContext(connection) as captured:
        page = narrowing_page(alice_page)
    rows = cells(page, "whatif-definition-costs")
    assert [row[1:3] for row in rows] == [["gpt-plain", str(sum(i % 17 != 5 for i in range(120)))]]
    assert re.fullmatch(r"\d{3}", rows[0][3])  # tokens a definition, estimated
    read = [q["sql"] for q in captured.captured_queries]
    assert not [sql for sql in read if re.search(rf'\b"?{table}"?\b', sql)]


def test_a_model_with_too_few_calls_is_not_estimated_from_the_rollups_either(alice):
    post(alice, noisy_calls("gpt-rare", MIN_CALLS, messages=False, seed=9))
    catchup.catch_up()
    rare = estimates(alice)["gpt-rare"]
    assert not rare.estimated
    assert rare.reason == f"{rare.calls} calls report toolsCount, under {MIN_CALLS}"


def test_only_the_calls_that_report_tools_count_are_kept_for_the_estimate(alice):
    data = {"iteration": 0, "provider": "openai", "model": "gpt-x", "stopReason": "end",
            "usage": {"input": 10, "output": 1, "cacheRead": 5}, "durationMs": 5.0}  # fmt: skip
    post(alice, [
        record("model_call", data=data, run_id="r", ts=at(1)),
        record("model_call", data={**data, "toolsCount": 4}, run_id="r", ts=at(2)),
    ])  # fmt: skip
    catchup.catch_up()
    kept = Rollup.objects.filter(kind=TOOL_DEFINITIONS).values_list("grain", "key", "count",
                                                                    "tokens_in")  # fmt: skip
    assert sorted(kept) == [("day", "openai|4|", 1, 15), ("hour", "openai|4|", 1, 15)]
    assert sum(Rollup.objects.filter(kind="model_call", grain="day").values_list(
        "count", flat=True)) == 2  # fmt: skip

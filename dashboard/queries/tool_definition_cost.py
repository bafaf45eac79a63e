"""What a tool definition costs a main model, for the narrowing what-if's savings
(dashboard.views.tool_pages.narrowing).

No record says how many tokens its tool definitions took. A model call reports its prompt
tokens (input, cached input included) and, when the sender knows it, `toolsCount` (the tool
definitions it carried) and `messagesCount`. Per main model, the tokens of one definition are
estimated as the least-squares slope of a call's prompt tokens on its toolsCount, with
messagesCount beside it when every call reports it (a conversation grows with its steps, and
the tools served vary with them). The estimate stands only when it is clearly above zero (at
least two standard errors) over at least MIN_CALLS calls; otherwise the model is "not
estimated", never zero. It is priced at the model's input price (records.contract.cost: the
project's override, else genai-prices), the uncached rate: cached definitions cost less, so a
saving is an upper bound for a model that caches them.

One read, bounded: the latest SAMPLE model calls of the period that report toolsCount (index
record_ts), however many records the period holds. The what-if itself reads rollups
(dashboard.queries.tool_queries).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db.models import BigIntegerField
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Cast

from records.contract.cost import UNKNOWN, Usage, price
from records.contract.rollup_keys import MODEL_CALL
from records.models import Record
from records.store.pricing import project_overrides

SAMPLE = 1000  # model calls read at most
MIN_CALLS = 20  # calls of a model below which it is not estimated
MILLION = 1_000_000


@dataclass(frozen=True)
class DefinitionCost:
    """One main model's estimate: tokens per tool definition and nano-USD per input token,
    or `reason` why it is not estimated."""

    provider: str
    model: str
    calls: int
    tokens: float | None = None
    nano_per_token: float | None = None
    reason: str | None = None

    @property
    def estimated(self) -> bool:
        return self.reason is None

    @property
    def nano_per_thousand(self) -> float | None:
        """nano-USD per thousand tool definitions served."""
        if self.tokens is None or self.nano_per_token is None:
            return None
        return self.tokens * self.nano_per_token * 1000


def slope(points: Sequence[tuple[float, ...]]) -> tuple[float, float] | None:
    """Least squares of y on x (and z when given): (x's coefficient, its standard error), or
    None when the regressors do not vary enough to tell. `points` are (x, y) or (x, z, y)."""
    n = len(points)
    k = len(points[0]) if points else 0
    if n <= k:
        return None
    columns = [[p[i] for p in points] for i in range(k - 1)]
    ys = [p[-1] for p in points]
    means = [sum(c) / n for c in columns]
    y_mean = sum(ys) / n
    xs = [[v - m for v in c] for c, m in zip(columns, means, strict=True)]
    yc = [y - y_mean for y in ys]
    # The normal equations of the centred data, one or two regressors.
    s = [[sum(a * b for a, b in zip(xi, xj, strict=True)) for xj in xs] for xi in xs]
    t = [sum(a * b for a, b in zip(xi, yc, strict=True)) for xi in xs]
    if len(xs) == 1:
        if s[0][0] <= 0:
            return None
        inverse = [[1 / s[0][0]]]
    else:
        det = s[0][0] * s[1][1] - s[0][1] * s[1][0]
        if det <= 1e-9 * s[0][0] * s[1][1] or s[0][0] <= 0:
            return None
        inverse = [[s[1][1] / det, -s[0][1] / det], [-s[1][0] / det, s[0][0] / det]]
    beta = [sum(inverse[i][j] * t[j] for j in range(len(t))) for i in range(len(t))]
    residual = sum(
        (y - sum(b * x[i] for b, x in zip(beta, xs, strict=True))) ** 2 for i, y in enumerate(yc)
    )
    variance = residual / (n - k)
    return beta[0], math.sqrt(max(variance * inverse[0][0], 0.0))


def estimate(provider: str, model: str, calls: list[tuple], nano_per_token: float | None):
    """A DefinitionCost from a model's calls [(tools, messages or None, prompt tokens)]."""
    if len(calls) < MIN_CALLS:
        reason = f"{len(calls)} calls report toolsCount, under {MIN_CALLS}"
        return DefinitionCost(provider, model, len(calls), reason=reason)
    if all(m is not None for _, m, _ in calls):
        fit = slope([(t, m, y) for t, m, y in calls]) or slope([(t, y) for t, _, y in calls])
    else:
        fit = slope([(t, y) for t, _, y in calls])
    if fit is None:
        return DefinitionCost(provider, model, len(calls),
                              reason="every call carried the same number of tools")  # fmt: skip
    tokens, error = fit
    if tokens <= 2 * error:
        return DefinitionCost(
            provider, model, len(calls),
            reason="prompt tokens do not rise measurably with the tools served",
        )  # fmt: skip
    if nano_per_token is None:
        return DefinitionCost(provider, model, len(calls), tokens, reason="no known input price")
    return DefinitionCost(provider, model, len(calls), tokens, nano_per_token)


def definition_costs(
    project_id: int, start: datetime, end: datetime, agents: list[str]
) -> list[DefinitionCost]:
    """Per main model of the latest SAMPLE model calls in [start, end) that report
    toolsCount, the cost of one tool definition: most calls first."""
    usage = KeyTransform("usage", "data")

    def count(name, of="data"):
        return Cast(KeyTextTransform(name, of), BigIntegerField())

    calls = Record.objects.filter(
        project_id=project_id, kind=MODEL_CALL, ts__gte=start, ts__lt=end,
        data__toolsCount__isnull=False,
    )  # fmt: skip
    if agents:
        calls = calls.filter(agent__in=agents)
    rows = (
        calls.order_by("-ts")
        .annotate(
            provider_text=KeyTextTransform("provider", "data"),
            tools=count("toolsCount"),
            messages=count("messagesCount"),
            cache_read=count("cacheRead", usage),
            cache_write=count("cacheWrite", usage),
        )
        .values_list(
            "provider_text", "model", "tools", "messages", "tokens_in", "cache_read", "cache_write"
        )[:SAMPLE]  # fmt: skip
    )
    by_model: dict[tuple[str, str], list[tuple]] = defaultdict(list)
    for provider, model, tools, messages, t_in, c_read, c_write in rows:
        prompt = (t_in or 0) + (c_read or 0) + (c_write or 0)
        by_model[(provider or "", model or "")].append((tools, messages, prompt))
    overrides = project_overrides(project_id) if by_model else []
    out = []
    for (provider, model), model_calls in by_model.items():
        # The input price at the end of the range: one price for the whole what-if.
        cost = price(Usage(model or None, provider or None, input=MILLION), end, overrides)
        per_token = None if cost.source == UNKNOWN or cost.nano is None else cost.nano / MILLION
        out.append(estimate(provider, model, model_calls, per_token))
    return sorted(out, key=lambda d: (-d.calls, d.provider, d.model))


@dataclass(frozen=True)
class Saving:
    """What serving the top N instead of every offered tool saves over the period's decisions:
    tool definitions, and (None: not estimated) input tokens and nano-USD."""

    n: int
    definitions: float
    tokens: float | None
    nano: float | None


def savings(
    decisions: int, points: Sequence[tuple[int, float, float]], costs: Sequence[DefinitionCost]
) -> tuple[list[Saving], float]:
    """Per top-N of the what-if (points: N, miss rate, mean definitions served), the saving
    against the full set, priced as the period's sampled calls split across the estimated
    models; and the share of sampled calls whose model is estimated (0: none, not estimated)."""
    if not points:
        return [], 0.0
    full = points[-1][2]
    estimated = [c for c in costs if c.estimated]
    sampled = sum(c.calls for c in costs)
    weight = sum(c.calls for c in estimated)
    tokens = nano = None
    if weight:
        tokens = sum(c.calls * (c.tokens or 0) for c in estimated) / weight
        nano = sum(c.calls * (c.tokens or 0) * (c.nano_per_token or 0) for c in estimated) / weight
    out = []
    for n, _, served in points:
        saved = (full - served) * decisions
        out.append(
            Saving(n, saved, None if tokens is None else saved * tokens,
                   None if nano is None else saved * nano)
        )  # fmt: skip
    return out, (weight / sampled if sampled else 0.0)

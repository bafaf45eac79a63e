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

Read from rollups only, over every call of the period: the catch-up keeps the calls that report
toolsCount as TOOL_DEFINITIONS rows (records.contract.rollup_keys), per hour and day, keyed by
provider, toolsCount and messagesCount, with the count of calls, the sum of their prompt tokens
and of its squares. Those are the fit's sufficient statistics (`Moments`): the slope is the one
the calls themselves give, exactly, whatever the number of calls.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction

from records.contract import rollup_keys
from records.contract.cost import UNKNOWN, Usage, price
from records.contract.rollup_keys import TOOL_DEFINITIONS
from records.metrics import reader
from records.store.ingest_pricing import project_overrides

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


@dataclass
class Moments:
    """The sums least squares of prompt tokens (y) on toolsCount (x), and messagesCount (z)
    beside it, needs: over every call (n), and over the calls that report messagesCount (nz).
    Integers but `syy` (the squares only weigh the error), so the slope is exact."""

    n: int = 0
    sx: int = 0
    sxx: int = 0
    sy: int = 0
    sxy: int = 0
    syy: float = 0.0
    nz: int = 0
    sz: int = 0
    szz: int = 0
    sxz: int = 0
    szy: int = 0

    def add(self, tools: int, messages: int | None, calls: int, prompt: int, squares: float):
        """`calls` calls that carried `tools` definitions and `messages` messages (None: not
        reported), their prompt tokens summing to `prompt` and their squares to `squares`."""
        self.n += calls
        self.sx += tools * calls
        self.sxx += tools * tools * calls
        self.sy += prompt
        self.sxy += tools * prompt
        self.syy += squares
        if messages is not None:
            self.nz += calls
            self.sz += messages * calls
            self.szz += messages * messages * calls
            self.sxz += tools * messages * calls
            self.szy += messages * prompt

    @classmethod
    def of(cls, calls: Iterable[tuple[int, int | None, int]]) -> Moments:
        """The moments of calls [(tools, messages or None, prompt tokens)]."""
        out = cls()
        for tools, messages, prompt in calls:
            out.add(tools, messages, 1, prompt, float(prompt * prompt))
        return out


def slope(m: Moments, with_messages: bool) -> tuple[float, float] | None:
    """Least squares of y on x (and z, `with_messages`): (x's coefficient, its standard error),
    or None when the regressors do not vary enough to tell."""
    n = m.n
    k = 3 if with_messages else 2
    if n <= k:
        return None

    def centred(sab, sa, sb) -> Fraction:  # the centred cross product, exactly
        return Fraction(sab) - Fraction(sa) * Fraction(sb) / n

    cxx, cxy = centred(m.sxx, m.sx, m.sx), centred(m.sxy, m.sx, m.sy)
    cyy = centred(Fraction(m.syy), m.sy, m.sy)
    if not with_messages:
        if cxx <= 0:
            return None
        beta = cxy / cxx
        residual = cyy - beta * cxy
        return float(beta), math.sqrt(max(float(residual) / (n - k) / float(cxx), 0.0))
    czz, cxz, czy = (
        centred(m.szz, m.sz, m.sz),
        centred(m.sxz, m.sx, m.sz),
        centred(m.szy, m.sz, m.sy),
    )
    det = cxx * czz - cxz * cxz
    if cxx <= 0 or det <= Fraction(1, 10**9) * cxx * czz:
        return None
    beta = (czz * cxy - cxz * czy) / det
    gamma = (cxx * czy - cxz * cxy) / det
    residual = cyy - beta * cxy - gamma * czy
    variance = float(residual) / (n - k)
    return float(beta), math.sqrt(max(variance * float(czz / det), 0.0))


def estimate(provider: str, model: str, calls: Moments, nano_per_token: float | None):
    """A DefinitionCost from the moments of a model's calls."""
    n = calls.n
    if n < MIN_CALLS:
        return DefinitionCost(provider, model, n,
                              reason=f"{n} calls report toolsCount, under {MIN_CALLS}")  # fmt: skip
    fit = None
    if calls.nz == n:
        fit = slope(calls, with_messages=True)
    fit = fit or slope(calls, with_messages=False)
    if fit is None:
        return DefinitionCost(provider, model, n,
                              reason="every call carried the same number of tools")  # fmt: skip
    tokens, error = fit
    if tokens <= 2 * error:
        return DefinitionCost(
            provider, model, n, reason="prompt tokens do not rise measurably with the tools served"
        )
    if nano_per_token is None:
        return DefinitionCost(provider, model, n, tokens, reason="no known input price")
    return DefinitionCost(provider, model, n, tokens, nano_per_token)


def call_moments(
    project_id: int, grain: str, start: datetime, end: datetime, agents: list[str],
    releases: list[str] | None = None,
) -> dict[tuple[str, str], Moments]:  # fmt: skip
    """{(provider, model): Moments} of the model calls in [start, end) of `agents` (all when
    empty) that report toolsCount: one read of the TOOL_DEFINITIONS rows of `grain`, summed by
    the database over buckets and agents."""
    rows = reader.read(project_id, grain, start, end, kinds=(TOOL_DEFINITIONS,), agents=agents,
                       keep=("model", "key"), latency_sums=True, releases=releases)  # fmt: skip
    out: dict[tuple[str, str], Moments] = defaultdict(Moments)
    for r in rows:
        key = rollup_keys.decode(TOOL_DEFINITIONS, r.key)
        messages = int(key["messages"]) if key["messages"] else None
        out[(key["provider"], r.model)].add(
            int(key["tools"]), messages, r.count, r.tokens_in, r.latency_sum
        )
    return out


def definition_costs(
    project_id: int, grain: str, start: datetime, end: datetime, agents: list[str],
    releases: list[str] | None = None,
) -> list[DefinitionCost]:  # fmt: skip
    """Per main model of the model calls in [start, end) that report toolsCount, the cost of one
    tool definition: most calls first."""
    by_model = call_moments(project_id, grain, start, end, agents, releases)
    overrides = project_overrides(project_id) if by_model else []
    out = []
    for (provider, model), moments in by_model.items():
        # The input price at the end of the range: one price for the whole what-if.
        cost = price(Usage(model or None, provider or None, input=MILLION), end, overrides)
        per_token = None if cost.source == UNKNOWN or cost.nano is None else cost.nano / MILLION
        out.append(estimate(provider, model, moments, per_token))
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
    against the full set, priced as the period's calls split across the estimated
    models; and the share of those calls whose model is estimated (0: none, not estimated)."""
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

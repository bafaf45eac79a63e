"""What the overview and the models page show of spend, read from rollups only.

The catch-up adds each record with usage into its rollup row (records.catchup): `cost_nano`
(the spend of the priced records), `cost_records` (those with usage) and `cost_unknown` (those
of them with no known price), so a total is always shown with the share it leaves out. Three
kinds carry usage (records.metrics.cost_metrics.COST_KINDS): a model call (the main model, its
provider in the row's key), a pick (its classifier's own call) and a turn (the total its agent
reported). Read through the reader the `cost` metric folds, so the amounts are those
GET /api/v1/metrics/cost answers: the overview's totals come with the rows it reads by kind
(spend_of), its chart and the models page's table with one grouped read each.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from records.contract import rollup_keys
from records.contract.rollup_keys import MODEL_CALL, PICK, TURN
from records.metrics import reader
from records.metrics.cost_metrics import COST_KINDS, provider_of

# What a row's model is, by kind, as the models page names it.
ROLES = {MODEL_CALL: "main model", PICK: "classifier", TURN: "turn total (reported)"}


@dataclass
class SpendTally:
    """nano-USD of the priced records, the records with usage, and those without a price."""

    nano: int = 0
    records: int = 0
    unknown: int = 0

    def add(self, nano: int, records: int, unknown: int) -> None:
        self.nano += nano
        self.records += records
        self.unknown += unknown

    @property
    def unknown_share(self) -> float | None:
        return self.unknown / self.records if self.records else None


def cost_rows(
    project_id: int, grain: str, start: datetime, end: datetime, agents: list[str],
    releases: list[str] | None = None,
):  # fmt: skip
    """The rows of COST_KINDS with usage in [start, end), summed over agents by the database
    (records.metrics.reader, which the `cost` metric reads too)."""
    rows = reader.read(project_id, grain, start, end, kinds=COST_KINDS, agents=agents,
                       keep=("bucket", "kind", "model", "key"), releases=releases)  # fmt: skip
    return [r for r in rows if r.cost_records]


def spend_of(rows: Iterable[reader.Row]) -> SpendTally:
    """The spend of rows read with their cost columns (rows of other kinds add 0)."""
    out = SpendTally()
    for r in rows:
        if r.cost_records:
            out.add(r.cost_nano, r.cost_records, r.cost_unknown)
    return out


def spend_over_time(
    project_id: int, grain: str, start: datetime, end: datetime, agents: list[str],
    releases: list[str] | None = None,
) -> dict[str, list[tuple[datetime, int]]]:  # fmt: skip
    """Spend per model and bucket ({model label: [(bucket, nano)]}, the most spent first):
    one read, summed by the database over kinds, keys and agents."""
    by_model: dict[str, dict[datetime, int]] = defaultdict(lambda: defaultdict(int))
    for r in reader.read(project_id, grain, start, end, kinds=COST_KINDS, agents=agents,
                         keep=("bucket", "model"), releases=releases):  # fmt: skip
        if r.cost_nano:
            by_model[rollup_keys.model_label(r.model or None)][r.bucket] += r.cost_nano
    totals = {model: sum(points.values()) for model, points in by_model.items()}
    return {
        model: sorted(by_model[model].items())
        for model in sorted(totals, key=lambda m: (-totals[m], m))
    }


def spend_by_model(
    project_id: int, grain: str, start: datetime, end: datetime, agents: list[str],
    releases: list[str] | None = None,
) -> dict:  # fmt: skip
    """The period's spend per (role, provider, model), the most spent first, and its total.
    One query."""
    cells: dict[tuple[str, str, str], SpendTally] = defaultdict(SpendTally)
    total = SpendTally()
    for r in cost_rows(project_id, grain, start, end, agents, releases):
        cells[(ROLES[r.kind], provider_of(r) or "", r.model)].add(
            r.cost_nano, r.cost_records, r.cost_unknown
        )
        total.add(r.cost_nano, r.cost_records, r.cost_unknown)
    rows = [
        {
            "role": role,
            "provider": provider,
            "model": rollup_keys.model_label(model or None),
            "spend": spend,
        }  # fmt: skip
        for (role, provider, model), spend in cells.items()
    ]
    rows.sort(key=lambda r: (-r["spend"].nano, -r["spend"].unknown, r["role"], r["model"]))
    return {"rows": rows, "total": total}

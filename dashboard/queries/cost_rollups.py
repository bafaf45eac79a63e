"""What the overview and the models page show of spend, read from rollups only.

The catch-up adds each record with usage into its rollup row (records.catchup): `cost_nano`
(the spend of the priced records), `cost_records` (those with usage) and `cost_unknown` (those
of them with no known price), so a total is always shown with the share it leaves out. Three
kinds carry usage (records.metrics.cost_metrics.COST_KINDS): a model call (the main model, its
provider in the row's key), a pick (its classifier's own call) and a turn (the total its agent
reported). One grouped read per page, through the reader the `cost` metric folds, so the
amounts are those GET /api/v1/metrics?metric=cost answers.
"""

from __future__ import annotations

from collections import defaultdict
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


def cost_rows(project_id: int, grain: str, start: datetime, end: datetime, agents: list[str]):
    """The rows of COST_KINDS with usage in [start, end), summed over agents by the database
    (records.metrics.reader, which the `cost` metric reads too)."""
    rows = reader.read(project_id, grain, start, end, kinds=COST_KINDS, agents=agents,
                       keep=("bucket", "kind", "model", "key"))  # fmt: skip
    return [r for r in rows if r.cost_records]


def overview_spend(
    project_id: int, grain: str, start: datetime, end: datetime, previous_start: datetime,
    agents: list[str],
) -> dict:  # fmt: skip
    """The period's spend and the one before's, and the period's spend per model and bucket
    ({model label: [(bucket, nano)]}, the most spent first). One query."""
    now, before = SpendTally(), SpendTally()
    by_model: dict[str, dict[datetime, int]] = defaultdict(lambda: defaultdict(int))
    for r in cost_rows(project_id, grain, previous_start, end, agents):
        if r.bucket < start:
            before.add(r.cost_nano, r.cost_records, r.cost_unknown)
            continue
        now.add(r.cost_nano, r.cost_records, r.cost_unknown)
        if r.cost_nano:
            by_model[rollup_keys.model_label(r.model or None)][r.bucket] += r.cost_nano
    totals = {model: sum(points.values()) for model, points in by_model.items()}
    return {
        "spend": now,
        "previous": before,
        "by_model": {
            model: sorted(by_model[model].items())
            for model in sorted(totals, key=lambda m: (-totals[m], m))
        },
    }


def spend_by_model(
    project_id: int, grain: str, start: datetime, end: datetime, agents: list[str]
) -> dict:
    """The period's spend per (role, provider, model), the most spent first, and its total.
    One query."""
    cells: dict[tuple[str, str, str], SpendTally] = defaultdict(SpendTally)
    total = SpendTally()
    for r in cost_rows(project_id, grain, start, end, agents):
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

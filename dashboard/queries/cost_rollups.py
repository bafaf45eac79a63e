"""What the overview and the models page show of spend, read from rollups only.

The catch-up adds each record with usage into its rollup row (records.catchup): `cost_nano`
(the spend of the priced records), `cost_records` (those with usage) and `cost_unknown` (those
of them with no known price), so a total is always shown with the share it leaves out. Three
kinds carry usage: a model call (the main model, its provider in the row's key), a pick (its
classifier's own call) and a turn (the total its agent reported). One grouped read per page.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Sum

from records.contract import rollup_keys
from records.contract.buckets import truncate
from records.contract.rollup_keys import MODEL_CALL, PICK, TURN
from records.models import Grain, Rollup

COST_KINDS = (MODEL_CALL, PICK, TURN)
# What a row's model is, by kind, as the models page names it.
ROLES = {MODEL_CALL: "main model", PICK: "classifier", TURN: "turn total (reported)"}


@dataclass
class Spend:
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
    """(bucket, kind, model, key, nano, records, unknown) of the rows of COST_KINDS with usage
    in [start, end), summed over agents by the database."""
    rows = Rollup.objects.filter(
        project_id=project_id, grain=Grain(grain), bucket__gte=truncate(start, grain),
        bucket__lt=end, kind__in=COST_KINDS, cost_records__gt=0,
    )  # fmt: skip
    if agents:
        rows = rows.filter(agent__in=agents)
    return (
        rows.values_list("bucket", "kind", "model", "key")
        .annotate(nano=Sum("cost_nano"), n=Sum("cost_records"), unknown=Sum("cost_unknown"))
        .order_by()
    )


def overview_spend(
    project_id: int, grain: str, start: datetime, end: datetime, previous_start: datetime,
    agents: list[str],
) -> dict:  # fmt: skip
    """The period's spend and the one before's, and the period's spend per model and bucket
    ({model label: [(bucket, nano)]}, the most spent first). One query."""
    now, before = Spend(), Spend()
    by_model: dict[str, dict[datetime, int]] = defaultdict(lambda: defaultdict(int))
    for bucket, _, model, _, nano, n, unknown in cost_rows(
        project_id, grain, previous_start, end, agents
    ):
        if bucket < start:
            before.add(nano, n, unknown)
            continue
        now.add(nano, n, unknown)
        if nano:
            by_model[rollup_keys.model_label(model or None)][bucket] += nano
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
    cells: dict[tuple[str, str, str], Spend] = defaultdict(Spend)
    total = Spend()
    for _, kind, model, key, nano, n, unknown in cost_rows(project_id, grain, start, end, agents):
        provider = rollup_keys.decode(MODEL_CALL, key)["provider"] if kind == MODEL_CALL else ""
        cells[(ROLES[kind], provider or "", model)].add(nano, n, unknown)
        total.add(nano, n, unknown)
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

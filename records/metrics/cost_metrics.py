"""The spend metrics (docs/architecture.md, "Cost"): `cost` and `cost_per_run`, from the cost
columns the catch-up folds into the rollups of the kinds that carry usage."""

from __future__ import annotations

from records.contract import rollup_keys
from records.contract.rollup_keys import MODEL_CALL, PICK, RUN_LAST, TURN
from records.metrics.accumulators import Metric, Spend, SpendPerRun
from records.metrics.reader import Row

# The kinds whose records carry usage: a pick (the classifier's own call, under its model), a
# model call (the main model's) and a turn (a cost the agent reported).
COST_KINDS = (PICK, MODEL_CALL, TURN)


def provider_of(r: Row) -> str:
    """A model call's provider (its rollup key holds it); "" for the other kinds."""
    return rollup_keys.decode(MODEL_CALL, r.key)["provider"] if r.kind == MODEL_CALL else ""


def _spend(r: Row) -> tuple[int, int, int]:
    return r.cost_nano, r.cost_records, r.cost_unknown


def _cost(r: Row) -> list:
    if not r.cost_records:
        return []
    return [({"kind": r.kind, "provider": provider_of(r), "model": r.model}, _spend(r))]


def _cost_by_model(r: Row) -> list:
    return [({"model": r.model}, _spend(r))] if r.cost_records else []


def _cost_by_provider(r: Row) -> list:
    return [({"provider": provider_of(r)}, _spend(r))] if r.cost_records else []


def _per_run(r: Row) -> list:
    if r.kind == RUN_LAST:
        return [({}, (0, 0, 0, r.count))]
    return [({}, (*_spend(r), 0))] if r.cost_records else []


def _per_run_by_model(r: Row) -> list:
    if r.kind == RUN_LAST:  # shared by every model's group (Metric.shared_kinds)
        return [({}, (0, 0, 0, r.count))]
    return [({"model": r.model}, (*_spend(r), 0))] if r.cost_records else []


COST_METRICS = (
    Metric(
        "cost",
        COST_KINDS,
        Spend,
        _cost,
        group_bys=("model", "agent", "provider", "kind"),
        variants=(("model", _cost_by_model), ("provider", _cost_by_provider)),
        doc="Spend in USD of picks (the classifier's usage), model calls and turns (a reported "
        "totalCost), by kind, provider and model; count is the records with usage, unknown "
        "those of them with no known price (not in the value).",
    ),
    Metric(
        "cost_per_run",
        (*COST_KINDS, RUN_LAST),
        SpendPerRun,
        _per_run,
        group_bys=("agent", "model"),
        variants=(("model", _per_run_by_model),),
        shared_kinds=(RUN_LAST,),
        shared_split=("agent",),
        doc="Spend in USD / runs (each run counted once, in the bucket of its last record); "
        "by model, that model's spend over every run; count is the runs.",
    ),
)

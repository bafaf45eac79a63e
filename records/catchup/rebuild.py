"""Re-derive stored records and rebuild everything the catch-up pass keeps.

The derived columns are computed on ingest (records.contract.derive). When a derivation changes (a
definition corrected, a new facet), the stored records are derived again from their
data, and the rollups, classifications, tool decisions, streaks and run summaries are dropped
and the watermark reset, so the workers fold every record in again with the new definitions.

A migration that changes a derivation does not call this code, which changes after it is
written: it asks for a rebuild with a Watermark row named REBUILD_REQUESTED, and
`rebuild_if_requested` (run after `migrate`) rebuilds once with the derivations of the code being
migrated to, whichever migrations asked. An operator runs `manage.py rebuild_rollups`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import msgspec
import orjson
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from records.contract.kinds import KINDS
from records.contract.normalise import named_models

log = logging.getLogger(__name__)

# The columns `rederive` recomputes from a record's kind and data.
DERIVED_COLUMNS = (
    "model", "iteration", "latency_ms", "skip_reason", "outcome", "is_swap", "is_fallback",
    "is_error", "is_contract_break", "rollup_key", "tokens_in", "tokens_out", "named_models",
    "has_violation", "derived",
)  # fmt: skip
# Derived fields that come from the ingest path, not from the data: kept as they are.
_KEPT = ("nul_replaced",)


def derived_columns(kind: str, data: dict, stored: dict) -> dict:
    """The DERIVED_COLUMNS of a stored record, derived again from its data."""
    spec = KINDS[kind]
    derived = spec.derive(msgspec.convert(data, spec.data_type))
    fields = dict(derived.fields)
    fields.update({name: stored[name] for name in _KEPT if name in stored})
    if derived.violations:
        fields["violations"] = derived.violations
    return {
        "model": derived.model,
        "iteration": derived.iteration,
        "latency_ms": derived.latency_ms,
        "skip_reason": derived.skip_reason,
        "outcome": derived.outcome,
        "is_swap": derived.is_swap,
        "is_fallback": derived.is_fallback,
        "is_error": derived.is_error,
        "is_contract_break": derived.is_contract_break,
        "rollup_key": derived.rollup_key,
        "tokens_in": derived.tokens_in,
        "tokens_out": derived.tokens_out,
        "named_models": named_models(derived.model, derived.other_models),
        "has_violation": bool(derived.violations),
        "derived": fields,
    }


def rederive(record_model, *, chunk: int = 5000, progress: Callable[[int], None] | None = None):
    """Derive every stored record again, `chunk` records a transaction, in id order."""
    last_id, done = 0, 0
    while True:
        with transaction.atomic():
            batch = list(
                record_model.objects.filter(id__gt=last_id)
                .order_by("id")
                .only("id", "kind", "data", "derived")[:chunk]
            )
            if not batch:
                return done
            for record in batch:
                data = record.data if isinstance(record.data, dict) else orjson.loads(record.data)
                for name, value in derived_columns(record.kind, data, record.derived).items():
                    setattr(record, name, value)
            record_model.objects.bulk_update(batch, DERIVED_COLUMNS, batch_size=1000)
        last_id = batch[-1].id
        done += len(batch)
        if progress:
            progress(done)


_DROPPED = ("Rollup", "StreakSegment", "Streak", "Classification", "ToolDecision", "ToolMiss")


def reset_rollups(models) -> None:
    """Drop what the catch-up pass keeps and rewind its watermark: the workers rebuild it.

    `models` maps names to model classes (the app registry's, or a migration's historical ones).
    """
    with transaction.atomic():
        for name in _DROPPED:
            if name in models:  # (a migration before ToolDecision passes no such model)
                models[name].objects.all().delete()
        runs = models["Run"]
        # A migration before the cost columns passes a Run without them.
        costs = {"cost_nano": 0, "cost_unknown": 0}
        known = {f.name for f in runs._meta.get_fields()}
        runs.objects.update(
            record_count=0,
            kind_counts={},
            models_seen={},
            has_swap=False,
            has_fallback=False,
            has_error=False,
            has_contract_break=False,
            has_violation=False,
            **{name: value for name, value in costs.items() if name in known},
        )
        # Every catch-up lane's watermark ("rollups", or "rollups:i/n": records.catchup.passes).
        watermarks = models["Watermark"].objects
        (watermarks.filter(name="rollups") | watermarks.filter(name__startswith="rollups:")).update(
            last_id=0
        )
        if "PendingBatch" in models:  # (a migration before it passes no such model)
            # Every record waits again, from now: what each project's freshness reads.
            batches = models["PendingBatch"]
            batches.objects.all().delete()
            now = timezone.now()
            newest = models["Record"].objects.values("project_id").annotate(last=Max("id"))
            batches.objects.bulk_create(
                batches(project_id=row["project_id"], last_id=row["last"], received_at=now)
                for row in newest.order_by()
            )


# The Watermark row by which a migration asks for a rebuild (migrations 0006 and 0009 write it).
REBUILD_REQUESTED = "rebuild-requested"


def rebuild_if_requested(using: str = "default", **kwargs) -> None:
    """After `migrate` (post_migrate): rebuild when a migration asked for it, then forget the
    request."""
    from django.apps import apps

    models = {model.__name__: model for model in apps.get_app_config("records").get_models()}
    requests = models["Watermark"].objects.using(using).filter(name=REBUILD_REQUESTED)
    if not requests.exists():
        return
    done = rebuild(models)
    requests.delete()
    log.info("rebuilt after migrate, as a migration asked: %s records derived again", done)


def rebuild(models, **kwargs) -> int:
    """rederive, then reset_rollups; returns how many records were derived again."""
    done = rederive(models["Record"], **kwargs)
    reset_rollups(models)
    log.info("re-derived %s records; the catch-up pass rebuilds the rollups", done)
    return done

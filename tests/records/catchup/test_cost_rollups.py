"""The catch-up folds each record's cost into its rollup rows and its run (records.catchup)."""

from __future__ import annotations

from collections import defaultdict

import pytest
from django.apps import apps
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from records import catchup
from records.catchup.rebuild import reset_rollups
from records.contract.buckets import truncate
from records.contract.cost import GENAI_PRICES, REPORTED, UNKNOWN
from records.models import Grain, Record, Rollup, Run, Watermark
from tests.support import cost_data
from tests.support.cost_data import ingest_shuffled

pytestmark = pytest.mark.both_dbs

COST_KINDS = ("tool_choice.pick", "model_call", "turn")


def expected_cells(project, grain):
    """{(bucket, kind, agent, model, key): [cost_nano, records with usage, unknown]} from the
    records' own cost columns."""
    out = defaultdict(lambda: [0, 0, 0])
    rows = Record.objects.filter(project=project, cost_source__isnull=False).values_list(
        "ts", "kind", "agent", "model", "rollup_key", "cost_nano"
    )
    for ts, kind, agent, model, key, nano in rows:
        cell = out[(truncate(ts, grain), kind, agent or "", model or "", key)]
        cell[0] += nano or 0
        cell[1] += 1
        cell[2] += nano is None
    return dict(out)


def stored_cells(project, grain):
    rows = Rollup.objects.filter(project=project, grain=grain, cost_records__gt=0)
    return {
        (r.bucket, r.kind, r.agent, r.model, r.key): [r.cost_nano, r.cost_records, r.cost_unknown]
        for r in rows
    }


def expected_runs(project):
    out = defaultdict(lambda: [0, 0])
    rows = Record.objects.filter(project=project, cost_source__isnull=False).values_list(
        "run_id", "cost_nano"
    )
    for run_id, nano in rows:
        out[run_id][0] += nano or 0
        out[run_id][1] += nano is None
    return dict(out)


def stored_runs(project):
    return {
        run_id: [nano, unknown]
        for run_id, nano, unknown in Run.objects.filter(project=project).values_list(
            "run_id", "cost_nano", "cost_unknown"
        )
        if nano or unknown
    }


def test_it_folds_each_records_cost_into_its_minute_hour_and_day_rows(alice):
    ingest_shuffled(alice, cost_data.build())
    sources = set(
        Record.objects.filter(project=alice.project).values_list("cost_source", flat=True)
    )
    assert {GENAI_PRICES, REPORTED, UNKNOWN, None} <= sources
    for grain in (Grain.MINUTE, Grain.HOUR, Grain.DAY):
        want = expected_cells(alice.project, grain)
        assert want and stored_cells(alice.project, grain) == want, grain
    assert (
        not Rollup.objects.filter(project=alice.project)
        .exclude(kind__in=COST_KINDS)
        .exclude(cost_nano=0, cost_records=0, cost_unknown=0)
    )


def test_it_keeps_each_runs_spend_and_its_records_of_unknown_price(alice):
    ingest_shuffled(alice, cost_data.build())
    runs = expected_runs(alice.project)
    assert any(unknown for _, unknown in runs.values())
    assert stored_runs(alice.project) == runs


def test_a_rebuild_folds_the_same_costs_again(alice):
    ingest_shuffled(alice, cost_data.build(120, seed=3))
    before = stored_cells(alice.project, Grain.HOUR), stored_runs(alice.project)
    reset_rollups({m.__name__: m for m in apps.get_app_config("records").get_models()})
    assert not stored_runs(alice.project)
    first = Record.objects.filter(project=alice.project).order_by("id").values_list("id", flat=True)
    Watermark.objects.update_or_create(name=catchup.WATERMARK, defaults={"last_id": first[0] - 1})
    catchup.catch_up()
    assert (stored_cells(alice.project, Grain.HOUR), stored_runs(alice.project)) == before


def test_a_rebuild_from_a_migration_before_the_cost_columns_leaves_them_alone(alice):
    ingest_shuffled(alice, cost_data.build(60, seed=4))
    state = MigrationExecutor(connection).loader.project_state(
        ("records", "0028_unroutable_notice_is_a_fallback")
    )
    historical = {name: state.apps.get_model("records", name) for name in ("Run", "Watermark")}
    assert "cost_nano" not in {f.name for f in historical["Run"]._meta.get_fields()}
    reset_rollups(historical)
    assert set(
        Run.objects.filter(project=alice.project).values_list("record_count", flat=True)
    ) == {0}

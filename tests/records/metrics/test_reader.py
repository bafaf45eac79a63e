"""records.metrics.reader's written-out SQL reads what the stored rows say, on both databases."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta

import pytest

from records.contract.sketch import Sketch
from records.metrics import reader
from records.models import Grain, Project, Rollup

T0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
LATENCY = "derived.pick_latency"


def sketch_of(*values: float) -> dict:
    sketch = Sketch()
    sketch.extend(values)
    return sketch.to_json()


@pytest.fixture
def stored(db) -> tuple[Project, list[Rollup]]:
    """Rows over three minutes, two agents, two kinds and keys with LIKE's own characters."""
    project, other = Project.objects.create(name="p"), Project.objects.create(name="q")
    rows = []
    for minute in range(3):
        for agent in ("a", "b"):
            for n, key in enumerate(("t_1|x", "t%1|x", "tx1|x", "t_2|y")):
                rows.append(Rollup(project=project, grain=Grain.MINUTE,
                                   bucket=T0 + timedelta(minutes=minute), kind="tool.call",
                                   agent=agent, model="m", key=key, count=n + 1, tokens_in=10,
                                   tokens_out=minute, latency_sum=0.5 * n))  # fmt: skip
            rows.append(Rollup(project=project, grain=Grain.MINUTE,
                               bucket=T0 + timedelta(minutes=minute), kind=LATENCY, agent=agent,
                               model="m", key="", count=2,
                               sketch=sketch_of(10.0 * (minute + 1), 0.0)))  # fmt: skip
    Rollup.objects.bulk_create(rows)
    # Another project, another grain and a bucket past the end: never read.
    Rollup.objects.create(project=other, grain=Grain.MINUTE, bucket=T0, kind="tool.call",
                          count=100, key="t_1|x")  # fmt: skip
    Rollup.objects.create(project=project, grain=Grain.HOUR, bucket=T0, kind="tool.call",
                          count=100, key="t_1|x")  # fmt: skip
    Rollup.objects.create(project=project, grain=Grain.MINUTE, bucket=T0 + timedelta(minutes=3),
                          kind="tool.call", count=100, key="t_1|x")  # fmt: skip
    return project, rows


def read(project, **kw):
    return reader.read(project.pk, "minute", T0, T0 + timedelta(minutes=3), **kw)


def summed(rows, keep, **where):
    """What the database should sum: the stored rows, filtered and added up in Python."""
    out = defaultdict(lambda: [0, 0, 0, 0.0])
    for r in rows:
        if all(getattr(r, k) in v for k, v in where.items()):
            cell = out[tuple(getattr(r, c) for c in keep)]
            cell[0] += r.count
            cell[1] += r.tokens_in
            cell[2] += r.tokens_out
            cell[3] += r.latency_sum
    return {k: tuple(v) for k, v in out.items()}


@pytest.mark.both_dbs
@pytest.mark.parametrize("keep", [reader.COLUMNS, ("kind", "key"), ("bucket", "kind", "agent")])
def test_counts_are_summed_over_the_columns_not_kept(stored, keep):
    project, rows = stored
    got = read(project, kinds=("tool.call",), keep=keep, latency_sums=True)
    assert {
        tuple(getattr(r, c) for c in keep): (r.count, r.tokens_in, r.tokens_out, r.latency_sum)
        for r in got
    } == summed(rows, keep, kind={"tool.call"})
    assert len(got) == len(summed(rows, keep, kind={"tool.call"}))


@pytest.mark.both_dbs
def test_a_key_prefix_is_literal_and_agents_filter(stored):
    project, rows = stored
    for prefix in ("t_1", "t%1", "t_"):
        got = read(project, kinds=("tool.call",), key_prefix=prefix, agents=["b"],
                   keep=("agent", "key"))  # fmt: skip
        assert {(r.agent, r.key): r.count for r in got} == {
            k: v[0]
            for k, v in summed(rows, ("agent", "key"), agent={"b"}, kind={"tool.call"}).items()
            if k[1].startswith(prefix)
        }


@pytest.mark.both_dbs
def test_sketch_kinds_come_with_their_sketches_and_the_rest_without(stored):
    project, rows = stored
    got = read(project, sketch_kinds=(LATENCY,))  # every kind: the sketch kind row by row
    latency = [r for r in got if r.kind == LATENCY]
    assert len(latency) == 6 and all(r.sketch for r in latency)
    merged = Sketch()
    for r in latency:
        reader.merge_into(merged, r.sketch)
    assert (merged.count, merged.zero) == (12, 6)
    assert merged.quantile(1.0) == pytest.approx(30.0, rel=0.01)
    calls = [r for r in got if r.kind == "tool.call"]
    assert sum(r.count for r in calls) == sum(r.count for r in rows if r.kind == "tool.call")
    assert all(r.sketch == {} for r in calls)
    by_minute = read(project, kinds=(LATENCY,), sketch_kinds=(LATENCY,), keep=("bucket",))
    got = sorted((r.bucket, r.count, r.sketch.quantile(1.0)) for r in by_minute)
    assert [(t, n) for t, n, _ in got] == [(T0 + timedelta(minutes=m), 4) for m in range(3)]
    assert [top for *_, top in got] == pytest.approx([10.0, 20.0, 30.0], rel=0.01)

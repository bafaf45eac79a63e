"""The latency sketch answers quantiles within 1 % of the exact value and merges exactly."""

from __future__ import annotations

import math
import random

import pytest

from records.contract.sketch import Sketch


def exact(values, q):
    ordered = sorted(values)
    return ordered[math.floor(q * (len(ordered) - 1))]


@pytest.mark.parametrize(
    "draw",
    [
        lambda r: r.lognormvariate(5, 1.2),  # skewed latencies, ms
        lambda r: r.uniform(0.5, 5000),
        lambda r: r.expovariate(1 / 300),
        lambda r: r.paretovariate(1.5) * 20,
    ],
)
@pytest.mark.parametrize("q", [0.01, 0.5, 0.9, 0.95, 0.99, 1.0])
def test_it_answers_quantiles_within_one_percent_of_the_exact_value(draw, q):
    rng = random.Random(42)
    values = [draw(rng) for _ in range(20_000)]
    sketch = Sketch()
    sketch.extend(values)
    assert sketch.quantile(q) == pytest.approx(exact(values, q), rel=0.01)


def test_it_merges_to_the_same_answer_as_one_sketch_of_everything():
    rng = random.Random(1)
    values = [rng.lognormvariate(4, 1) for _ in range(9000)]
    whole = Sketch()
    whole.extend(values)
    merged = Sketch()
    for part in (values[:1000], values[1000:5000], values[5000:]):
        piece = Sketch.from_json(_roundtrip(part))
        merged.merge(piece)
    assert merged.bins == whole.bins and merged.count == 9000
    assert merged.quantile(0.95) == whole.quantile(0.95)


def _roundtrip(values):
    s = Sketch()
    s.extend(values)
    return s.to_json()


def test_it_counts_zero_latencies_apart():
    sketch = Sketch()
    sketch.extend([0.0] * 60 + [100.0] * 40)
    assert sketch.quantile(0.5) == 0.0
    assert sketch.quantile(0.99) == pytest.approx(100.0, rel=0.01)


def test_it_has_no_quantile_when_empty():
    assert Sketch().quantile(0.5) is None


def test_merging_a_stored_sketch_equals_merging_the_sketch_it_stores():
    rng = random.Random(4)
    parts = [Sketch() for _ in range(5)]
    for part in parts:
        part.extend(rng.lognormvariate(5, 1.5) for _ in range(rng.randrange(0, 300)))
        part.extend([0.0] * rng.randrange(0, 3))
    built, stored = Sketch(), Sketch()
    for part in parts:
        built.merge(Sketch.from_json(part.to_json()))
        stored.merge_stored(part.to_json())
    assert (stored.bins, stored.zero) == (built.bins, built.zero)
    for q in (0.5, 0.95, 0.99):
        assert stored.quantile(q) == built.quantile(q)


def test_a_sketch_merged_into_an_empty_one_is_copied_not_shared():
    source = Sketch()
    source.extend([1.0, 2.0, 3.0])
    target = Sketch()
    target.merge(source)
    target.add(100.0)
    assert source.count == 3 and target.count == 4


def test_stored_sketches_merged_between_other_changes_count_once_each():
    # merge_stored sums stored sketches under their keys and makes them bins when the sketch
    # is next read: adds, merges and reads in between must see every one, once.
    rng = random.Random(7)
    values = [[rng.lognormvariate(4, 1) for _ in range(50)] + [0.0] for _ in range(6)]
    parts = [Sketch() for _ in values]
    for part, vs in zip(parts, values, strict=True):
        part.extend(vs)
    stored = [part.to_json() for part in parts]
    copies = [dict(s) for s in stored]
    mixed = Sketch()
    mixed.merge_stored(stored[0])
    mixed.merge_stored(stored[1])
    assert mixed.count == 102  # read: the two are bins now
    mixed.add(values[2][0])
    mixed.merge_stored(stored[3])
    mixed.merge(parts[4])
    mixed.merge_stored(stored[5])
    mixed.zero += 1
    everything = Sketch()
    everything.extend([*values[0], *values[1], values[2][0], *values[3], *values[4], *values[5]])
    assert (mixed.bins, mixed.zero) == (everything.bins, everything.zero + 1)
    assert stored == copies  # the rows' dicts are left as they were

"""The streak monoid: folding any split of the verdicts equals walking them one by one."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from records.contract import streak_segments

T0 = datetime(2026, 11, 20, tzinfo=UTC)


def walk(classes):
    """The streak rule read literally: +1 on parse_error, reset on a ruling, unavailable
    leaves it."""
    current = longest = 0
    for c in classes:
        if c == "parse_error":
            current += 1
            longest = max(longest, current)
        elif c in ("allow", "block"):
            current = 0
    return current, longest


def random_verdicts(rng, weights, most):
    """(classes, (class, ts, key) in order) of up to `most` verdicts: allow, block, parse_error
    and unavailable drawn with `weights`, a second apart."""
    classes = rng.choices(
        ["allow", "block", "parse_error", "unavailable"], weights, k=rng.randrange(0, most)
    )
    return classes, [(c, T0 + timedelta(seconds=i), f"k{i:03}") for i, c in enumerate(classes)]


@pytest.mark.parametrize("seed", range(40))
def test_any_split_folds_to_the_streak_of_the_whole_sequence(seed):
    rng = random.Random(seed)
    classes, verdicts = random_verdicts(rng, [3, 1, 4, 1], most=60)
    cuts = sorted(rng.sample(range(len(verdicts) + 1), k=min(5, len(verdicts) + 1)))
    pieces = [verdicts[a:b] for a, b in zip([0, *cuts], [*cuts, len(verdicts)], strict=True)]
    folded = streak_segments.fold(streak_segments.of_verdicts(p) for p in pieces)
    assert (folded.current, folded.longest) == walk(classes)
    broken = [ts for c, ts, _ in verdicts if c == "parse_error"]
    assert folded.last_broken_at == (max(broken) if broken else None)


def test_an_unavailable_classifier_leaves_the_streak_alone():
    seq = [
        ("parse_error", T0, "a"),
        ("unavailable", T0 + timedelta(1), "b"),
        ("parse_error", T0 + timedelta(2), "c"),
    ]
    seg = streak_segments.of_verdicts(seq)
    assert (seg.current, seg.longest) == (2, 2)


def test_the_minutes_a_late_verdict_reread_are_read_as_few_spans():
    from datetime import UTC, datetime, timedelta

    from records.catchup.streak_fold import minute_spans

    t = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
    m = timedelta(minutes=1)
    # Adjacent minutes join; a minute days away is its own span, not days of verdicts between.
    assert minute_spans([t, t + m, t + 2 * m, t + 3 * timedelta(days=1)]) == [
        (t, t + 3 * m),
        (t + 3 * timedelta(days=1), t + 3 * timedelta(days=1) + m),
    ]
    # Past `most` spans, the nearest are joined: every minute still covered.
    minutes = [t + i * 3 * m for i in range(10)]
    joined = minute_spans(minutes, most=4)
    assert len(joined) == 4
    assert all(any(s <= minute < e for s, e in joined) for minute in minutes)


@pytest.mark.parametrize("seed", range(40))
def test_a_minutes_verdicts_walked_at_once_equal_the_fold_of_each_verdict(seed):
    _, verdicts = random_verdicts(random.Random(seed), [3, 1, 4, 2], most=40)
    assert streak_segments.of_verdicts(verdicts) == streak_segments.fold(
        streak_segments.of_verdict(*v) for v in verdicts
    )

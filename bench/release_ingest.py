"""Ingest and the catch-up with releases on the records, against the same records without, in
the same run.

    .venv/bin/python bench/release_ingest.py [--records 40000] [--rounds 10] [--batch 500]

1. Recreates a scratch database (decisionboard_bench_release), migrates it and makes two
   projects, each in a catch-up lane of its own (two lanes).
2. Generates the demo records twice from one seed: one copy posts each run as one of two
   releases (bench.pages.RELEASES, by a hash of the run id), so that both releases share every
   bucket and the release dimension doubles the rollup rows (the worst case); the other copy
   carries no release, as every record did before releases existed.
3. In rounds that alternate which side goes first, writes each side's share of the round through
   api.record_writes.write_records (bench.common.timed_writes: judge, store, commit) and then
   folds it with that side's lane of the catch-up (records.catchup.catch_up(lane=...): rollups,
   runs, tool decisions, streaks, and the releases' markers), each timed.
4. Checks that both sides stored and folded every record, and that the release side has both
   releases' markers; appends the figures as one JSON line to bench/results/release_ingest.jsonl.

Prints `ingest with releases N rec/s, without M rec/s, ratio R; catch-up ... ratio R` as its
last line (goal: both ratios >= 0.95).
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
import zlib
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import exit_on_signals, setup_django, timed_writes  # noqa: E402
from bench.pages import RELEASES  # noqa: E402
from bench.results import record_result  # noqa: E402

LANES = 2
GOAL = 0.95


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=40_000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--batch", type=int, default=500)
    args = parser.parse_args()
    exit_on_signals()

    setup_django("decisionboard_bench_release")
    from django.conf import settings

    from records import catchup
    from records.demo.generator import generate_records
    from records.models import Project, Record, ReleaseMarker, Rollup

    # No worker runs: a nudge would only wait on a broker that is not there.
    settings.DECISIONBOARD = {**settings.DECISIONBOARD, "NUDGE_WORKERS": False}
    projects: dict[int, Project] = {}
    while len(projects) < LANES:  # one project in each lane
        project = Project.objects.create(name=f"release-bench-{Project.objects.count()}")
        projects.setdefault(catchup.lane_of(project.pk, LANES), project)
    lane = {"without": 0, "with": 1}
    sides = {side: projects[lane[side]] for side in lane}
    catchup.catch_up(lanes=LANES)  # the two lanes' watermarks, before any record

    end = datetime.now(UTC).replace(microsecond=0)
    plain = list(generate_records(records=args.records, runs=max(1, args.records // 100),
                                  end=end))  # fmt: skip
    released = copy.deepcopy(plain)
    for raw in released:
        raw["release"] = RELEASES[zlib.crc32(raw["run_id"].encode()) % len(RELEASES)]
    posted = {"without": plain, "with": released}
    print(f"{len(plain):,} demo records a side, {args.rounds} rounds in batches of {args.batch}, "
          f"releases {', '.join(RELEASES)} in every bucket of one side", flush=True)  # fmt: skip

    per_round = len(plain) // args.rounds
    ingest = {side: 0.0 for side in sides}
    fold = {side: 0.0 for side in sides}
    written = {side: 0 for side in sides}
    folded = {side: 0 for side in sides}
    now = datetime.now(UTC)
    for n in range(args.rounds):
        # Alternate which side goes first, so neither always follows the other's writes.
        order = ("without", "with") if n % 2 == 0 else ("with", "without")
        for side in order:
            chunk = posted[side][n * per_round : (n + 1) * per_round]
            took, accepted = timed_writes(sides[side], chunk, args.batch, now)
            ingest[side] += took
            written[side] += accepted
            started = time.perf_counter()
            folded[side] += catchup.catch_up(lane=lane[side], lanes=LANES, max_seconds=3600)
            fold[side] += time.perf_counter() - started
    for side, project in sides.items():
        stored = Record.objects.filter(project=project).count()
        if not stored == written[side] == folded[side] == per_round * args.rounds:
            raise SystemExit(f"{side}: stored {stored:,}, written {written[side]:,}, "
                             f"folded {folded[side]:,}")  # fmt: skip
    markers = set(
        ReleaseMarker.objects.filter(project=sides["with"]).values_list("name", flat=True)
    )
    if markers != set(RELEASES) or ReleaseMarker.objects.filter(project=sides["without"]).exists():
        raise SystemExit(
            f"release markers: {sorted(markers)}, expected {list(RELEASES)} on one side"
        )
    rows = {side: Rollup.objects.filter(project=sides[side]).count() for side in sides}
    ingest_rate = {side: written[side] / ingest[side] for side in sides}
    fold_rate = {side: folded[side] / fold[side] for side in sides}
    ingest_ratio = ingest_rate["with"] / ingest_rate["without"]
    fold_ratio = fold_rate["with"] / fold_rate["without"]
    print(f"rollup rows: {rows['with']:,} with releases, {rows['without']:,} without", flush=True)
    path = record_result(
        "release_ingest",
        {
            "records_per_side": written["with"],
            "rounds": args.rounds,
            "batch": args.batch,
            "rollup_rows": rows,
            "ingest_rate": {side: round(r) for side, r in ingest_rate.items()},
            "fold_rate": {side: round(r) for side, r in fold_rate.items()},
            "ingest_ratio": round(ingest_ratio, 3),
            "fold_ratio": round(fold_ratio, 3),
            "goal": GOAL,
        },
    )
    print(f"appended to {path}")
    print(f"ingest with releases {ingest_rate['with']:,.0f} rec/s, without "
          f"{ingest_rate['without']:,.0f} rec/s, ratio {ingest_ratio:.2f}; catch-up with releases "
          f"{fold_rate['with']:,.0f} rec/s, without {fold_rate['without']:,.0f} rec/s, ratio "
          f"{fold_ratio:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()

"""How much arrival order costs the catch-up: the same backlog folded in ts order and shuffled.

    .venv/bin/python bench/catchup.py [--records 150000] [--verdict-share 0.33] [--batch N]

`records` records of the last 30 minutes (the demo generator's mix, with verdicts topped up to
`verdict-share` of them: late verdicts are what re-folds streaks) are stored with no worker running,
once in ts order into one project and once shuffled into another, on a scratch PostgreSQL database
(autovacuum as the machine has it); each backlog is then caught up to the end by one process, in
passes of `batch` records (default: the catch-up's own, default_batch(); a smaller one shows what a
pass costs beyond its records, as under sustained ingest, where each pass folds what arrived since
the last: records.catchup.passes.PASS_SPACING_SECONDS). The COPY ceiling of the same rows is
measured in the same run (bench.common).

Prints, last: `in order N rec/s, shuffled M rec/s, shuffled/in-order R (goal >= 0.5),
shuffled/copy C (goal >= 0.5)`.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import copy_ceiling, setup_django, store_rows  # noqa: E402
from bench.results import record_result  # noqa: E402

SPREAD = timedelta(minutes=30)


def backlog(records: int, verdict_share: float, now: datetime) -> list[dict]:
    from records.demo.generator import generate_records

    end = now.replace(microsecond=0)
    generated = list(
        generate_records(records=records, runs=max(1, records // 100), seed=5, end=end, span=SPREAD)
    )
    verdicts = [r for r in generated if r["kind"] == "classifier.verdict"]
    extra = int(records * verdict_share) - len(verdicts)
    if extra <= 0 or not verdicts:
        return generated
    rng = random.Random(3)
    copies = []
    for i in range(extra):
        verdict = dict(rng.choice(verdicts))
        verdict["id"] = f"verdict-copy-{i}"
        verdict["ts"] = (
            end - timedelta(seconds=rng.uniform(0, SPREAD.total_seconds()))
        ).isoformat()
        copies.append(verdict)
    return generated[: records - extra] + copies


def fold(name: str, normalised: list, now: datetime, batch: int | None = None) -> float:
    from records import catchup
    from records.models import Project
    from records.store.writer import store_records

    project = Project.objects.create(name=name)
    for i in range(0, len(normalised), 5000):
        store_records(project.pk, normalised[i : i + 5000], now)
    start = time.perf_counter()
    folded = catchup.catch_up(max_seconds=3600, batch_size=batch)
    seconds = time.perf_counter() - start
    assert folded == len(normalised), (folded, len(normalised))
    print(f"{name}: {folded:,} records caught up in {seconds:.1f} s", flush=True)
    return folded / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=150_000)
    parser.add_argument("--verdict-share", type=float, default=0.33)
    parser.add_argument("--batch", type=int, default=None, help="records per pass")
    args = parser.parse_args()

    os.environ["DECISIONBOARD_VAR_DIR"] = "/tmp/decisionboard-bench-catchup"
    Path(os.environ["DECISIONBOARD_VAR_DIR"]).mkdir(exist_ok=True)
    setup_django("decisionboard_bench_catchup")
    from records.contract.normalise import normalise

    now = datetime.now(UTC)
    normalised = [normalise(r, now=now) for r in backlog(args.records, args.verdict_share, now)]
    in_order = fold(
        "in-order", sorted(normalised, key=lambda r: (r.ts, r.record_key)), now, args.batch
    )
    shuffled = normalised[:]
    random.Random(1).shuffle(shuffled)
    shuffled_rate = fold("shuffled", shuffled, now, args.batch)
    ceiling = copy_ceiling(store_rows(0, now, normalised))
    print(
        f"in order {in_order:,.0f} rec/s, shuffled {shuffled_rate:,.0f} rec/s, "
        f"shuffled/in-order {shuffled_rate / in_order:.2f} (goal >= 0.5), "
        f"shuffled/copy {shuffled_rate / ceiling:.2f} (goal >= 0.5)"
    )
    record_result(
        "catchup",
        {
            "options": vars(args),
            "in_order_rec_s": in_order,
            "shuffled_rec_s": shuffled_rate,
            "copy_rows_s": ceiling,
            "shuffled_to_in_order": shuffled_rate / in_order,
            "shuffled_to_copy": shuffled_rate / ceiling,
        },
    )


if __name__ == "__main__":
    main()

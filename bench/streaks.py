"""What the streak recompute of late minutes costs against reading their verdicts at all.

    .venv/bin/python bench/streaks.py [--records 600000] [--verdict-share 0.33] [--repeat 3]

`records` records of the last 30 minutes (bench/catchup.py's mix, verdicts topped up to
`verdict-share`), shuffled, are stored and caught up on a scratch PostgreSQL database, which is
then vacuumed and analysed. Then, `repeat` times: every minute's streak segment is marked dirty
(as half an hour of late verdicts leaves them in bench/soak.py) and `catchup.fold_dirty_streaks`
recomputes them, timed; and the ceiling, measured in the same run: the same verdicts read by
the recompute's own query (`verdicts_query`) in (ts, key) order into a discarding COPY, which
is what any recompute has to read.

Prints, last: `recompute of M minutes (V verdicts) S s (best), ordered read C s (best); ratio
R` where R is the read over the recompute (1.0: the recompute costs no more than the read).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import setup_django  # noqa: E402
from bench.results import record_result  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=600_000)
    parser.add_argument("--verdict-share", type=float, default=0.33)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    os.environ["DECISIONBOARD_VAR_DIR"] = "/tmp/decisionboard-bench-streaks"
    Path(os.environ["DECISIONBOARD_VAR_DIR"]).mkdir(exist_ok=True)
    setup_django("decisionboard_bench_streaks")
    from django.db import connection, transaction

    from bench.catchup import backlog
    from records import catchup
    from records.catchup import streak_fold
    from records.contract.normalise import normalise
    from records.models import Grain, Project, StreakSegment
    from records.store.writer import store_records

    now = datetime.now(UTC)
    normalised = [normalise(r, now=now) for r in backlog(args.records, args.verdict_share, now)]
    random.Random(1).shuffle(normalised)
    project = Project.objects.create(name="streaks")
    for i in range(0, len(normalised), 5000):
        store_records(project.pk, normalised[i : i + 5000], now)
    del normalised
    catchup.catch_up(max_seconds=3600)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")

    minutes = StreakSegment.objects.filter(project=project, grain=Grain.MINUTE)
    keys = list(minutes.values_list("project_id", "model", "bucket"))
    spans = streak_fold.minute_spans(sorted({bucket for _, _, bucket in keys}))
    models = {model for _, model, _ in keys}
    recompute, read, verdicts = [], [], 0
    for _ in range(args.repeat):
        minutes.update(dirty=True)
        start = time.perf_counter()
        assert catchup.fold_dirty_streaks() == len(keys)
        recompute.append(time.perf_counter() - start)

        sql, params = streak_fold.verdicts_query(project.pk, models, spans, catchup.folded_upto())
        with transaction.atomic(), connection.cursor() as cursor:
            start = time.perf_counter()
            with cursor.cursor.copy(
                cursor.cursor.mogrify(f"COPY ({sql}) TO STDOUT", params)
            ) as copy:
                # Text rows end in a newline (one inside a value is escaped): counted, not parsed.
                verdicts = sum(bytes(block).count(b"\n") for block in copy)
            read.append(time.perf_counter() - start)
    best, ceiling = min(recompute), min(read)
    print(
        f"recompute of {len(keys)} minutes ({verdicts:,} verdicts) {best:.2f} s (best), "
        f"ordered read {ceiling:.2f} s (best); ratio {ceiling / best:.2f}"
    )
    record_result(
        "streaks",
        {
            "options": vars(args),
            "minutes": len(keys),
            "verdicts": verdicts,
            "recompute_best_s": best,
            "ordered_read_best_s": ceiling,
            "ratio": ceiling / best,
        },
    )


if __name__ == "__main__":
    main()

"""Ingest with the default redaction detectors on, against ingest with none, in the same run.

    .venv/bin/python bench/redaction.py [--records 20000] [--rounds 10] [--batch 500]

1. Recreates a scratch database (decisionboard_bench_redaction), migrates it and makes two
   projects: one with every detector off (the ceiling), one with the defaults a new project has
   (keys, tokens and card numbers).
2. Generates the demo records (records.demo.generator) and gives them free text to scan: every
   tool call's arguments, error message, notice and reliability reason gets prose of a few
   hundred characters to two kilobytes with numbers, versions, dates and hyphenated words, and
   one in twenty a key or a card number to redact.
3. Writes them through api.record_writes.write_records, the one write of every transport
   (judge, redact, store and commit in PostgreSQL), in rounds that alternate between the two
   projects, each round the same records for both, so that a load on the shared machine falls
   on both sides alike. The HTTP layer costs the same either way and is left out, which makes
   the ratio stricter, not kinder.
4. Appends the figures as one JSON line to bench/results/redaction.jsonl (machine, commit).

Prints `redaction on N rec/s, off M rec/s, ratio R` as its last line (goal: R >= 0.9).
"""

from __future__ import annotations

import argparse
import random
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import exit_on_signals, setup_django, timed_writes  # noqa: E402
from bench.results import record_result  # noqa: E402

WORDS = (
    "the customer asked about the invoice for order shipped yesterday and wants a refund of "
    "the remaining balance before the release train leaves; retry the sync-job with backoff, "
    "check the follow-up note, compare build v2.14.0-rc.1 against 3.11.4 on 2026-12-06 at "
    "10:30:45, 42 items, 7.5 % off, read-only replica, 1.2.3.4, ETA 3 days"
).split()
SECRETS = (
    "sk-proj-Zq4Lm8Nw2Xc7Vb1Rt6Yu3Pk9Hs5Dg0Fa",
    "4111 1111 1111 1111",
    "AKIAZ7Q3L9M2N8P4X6RT",
    "Authorization: Bearer 8f3Kq9Lz2Wm7Xv4Nc1Tb6Ry5Hs0Pd",
)
FREE_TEXT = {
    "provider.error": "message",
    "reliability": "reason",
    "notice": "message",
    "tool_choice.pick_error": "message",
}


def prose(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(60, 320))]
    if rng.random() < 0.05:
        words.insert(rng.randrange(len(words)), rng.choice(SECRETS))
    return " ".join(words)


def with_free_text(records: list[dict], seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    for raw in records:
        data = raw["data"]
        if raw["kind"] == "turn":
            for call in data.get("toolCalls") or ():
                call["arguments"] = {"input": prose(rng), "limit": 20}
        elif raw["kind"] in FREE_TEXT:
            data[FREE_TEXT[raw["kind"]]] = prose(rng)[:4000]
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--batch", type=int, default=500)
    args = parser.parse_args()
    exit_on_signals()

    setup_django("decisionboard_bench_redaction")
    import orjson
    from django.conf import settings

    from records.demo.generator import generate_records
    from records.models import Project, Record, RedactionPolicy

    # No worker runs: a nudge would only wait on a broker that is not there.
    settings.DECISIONBOARD = {**settings.DECISIONBOARD, "NUDGE_WORKERS": False}
    off = Project.objects.create(name="redaction-off")
    RedactionPolicy.objects.create(project=off, secrets=False, cards=False)
    on = Project.objects.create(name="redaction-on")  # no policy row: a new project's defaults
    end = datetime.now(UTC).replace(microsecond=0)
    records = with_free_text(
        list(generate_records(records=args.records, runs=max(1, args.records // 100), end=end))
    )
    text_bytes = sum(len(orjson.dumps(r["data"])) for r in records) / len(records)
    print(
        f"{len(records):,} demo records with free text, {text_bytes:.0f} bytes of data each, "
        f"{args.rounds} rounds a side in batches of {args.batch}",
        flush=True,
    )

    per_round = len(records) // args.rounds
    seconds = {"off": 0.0, "on": 0.0}
    written = {"off": 0, "on": 0}
    now = datetime.now(UTC)
    for n in range(args.rounds):
        chunk = records[n * per_round : (n + 1) * per_round]
        # Alternate which side goes first, so neither always follows the other's writes.
        order = (("off", off), ("on", on)) if n % 2 == 0 else (("on", on), ("off", off))
        for side, project in order:
            took, accepted = timed_writes(project, chunk, args.batch, now)
            seconds[side] += took
            written[side] += accepted
    for side, project in (("off", off), ("on", on)):
        stored = Record.objects.filter(project=project).count()
        if stored != written[side] or stored != per_round * args.rounds:
            raise SystemExit(f"{side}: stored {stored:,}, written {written[side]:,}")
    redacted = Record.objects.filter(project=on, derived__has_key="redacted").count()
    if not redacted or Record.objects.filter(project=off, derived__has_key="redacted").exists():
        raise SystemExit("the workload redacted nothing, or the ceiling redacted something")
    rate = {side: written[side] / seconds[side] for side in seconds}
    ratio = rate["on"] / rate["off"]
    print(f"{redacted:,} of {written['on']:,} records had something redacted", flush=True)
    path = record_result(
        "redaction",
        {
            "records_per_side": written["on"],
            "rounds": args.rounds,
            "batch": args.batch,
            "data_bytes_per_record": round(text_bytes),
            "redacted_records": redacted,
            "on_rate": round(rate["on"]),
            "off_rate": round(rate["off"]),
            "ratio": round(ratio, 3),
            "goal": 0.9,
        },
    )
    print(f"appended to {path}")
    print(f"redaction on {rate['on']:,.0f} rec/s, off {rate['off']:,.0f} rec/s, ratio {ratio:.2f}")


if __name__ == "__main__":
    main()

"""The TypeScript client's cost to the agent: time per recorded call on the caller's thread,
against the least an in-memory queue costs, measured in the same run.

    .venv/bin/python bench/client_js.py [--records 100000] [--rounds 3] [--web-workers 2]
                                        [--database decisionboard_bench_client_js]

1. Recreates a scratch database (`--database`), migrates it, issues an ingest key.
2. Installs client-js (`npm ci`, when its lock changed since the last install) and builds it.
3. Starts the product under gunicorn and runs client-js/bench/calls.mjs against it: the sample
   records (examples/records.jsonl, every kind) through each kind's own method, in the
   frameworks' shapes, `--records` calls a round, 1,000 at a time with the event loop turning
   in between; then flush(). In each round, in turn: the floor (the same envelope objects
   pushed on a plain array), the client, and a hand-written sender (encode, gzip, post in
   batches of 500).

Prints as its last line `client_js call U µs/record (floor F µs, ratio R); thread T µs/record
(plain sender P µs, ratio Q); C rec/s` (goal: U < 5). `thread` is the main thread's busy time
per record over the whole run, the sender's encoding, gzip and fetch included (Node runs them
on the agent's thread too).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, exit_on_signals, gunicorn, setup_django  # noqa: E402
from bench.results import record_result  # noqa: E402

PACKAGE = ROOT / "client-js"


def npm_installed() -> None:
    """client-js's dev dependencies from its lock (again only when the lock changed), built."""
    lock = hashlib.sha256((PACKAGE / "package-lock.json").read_bytes()).hexdigest()
    stamp = PACKAGE / "node_modules" / ".installed-from-lock"
    if not stamp.exists() or stamp.read_text() != lock:
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=PACKAGE, check=True)
        stamp.write_text(lock)
    subprocess.run(["npm", "run", "build"], cwd=PACKAGE, check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000, help="calls a round")
    parser.add_argument("--rounds", type=int, default=3, help="the paths take turns")
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument(
        "--database", default="decisionboard_bench_client_js", help="the scratch database"
    )
    args = parser.parse_args()
    exit_on_signals()  # a killed run stops its gunicorn

    setup_django(args.database)
    from records.models import ApiKey, Project

    key = ApiKey.issue(Project.objects.create(name="client-js"), ApiKey.Scope.INGEST)[1]
    npm_installed()
    with gunicorn(args.web_workers) as (port, _):
        env = dict(
            os.environ,
            DECISIONBOARD_URL=f"http://127.0.0.1:{port}",
            DECISIONBOARD_KEY=key,
            DECISIONBOARD_EXAMPLES=str(ROOT / "examples" / "records.jsonl"),
            BENCH_RECORDS=str(args.records),
            BENCH_ROUNDS=str(args.rounds),
        )
        run = subprocess.run(
            ["node", "bench/calls.mjs"], cwd=PACKAGE, env=env, capture_output=True, text=True
        )
    if run.returncode != 0:
        sys.exit(f"client-js/bench/calls.mjs failed:\n{run.stdout}\n{run.stderr}")
    figures = json.loads(run.stdout.strip().splitlines()[-1])
    figures["call_ratio"] = figures["call_us"] / figures["floor_us"]
    figures["thread_ratio"] = figures["thread_us"] / figures["plain_thread_us"]
    figures["web_workers"] = args.web_workers
    print(f"rounds: {json.dumps(figures['each_round'])}")
    path = record_result("client_js", figures)
    print(f"results appended to {path.relative_to(ROOT)}")
    print(
        f"client_js call {figures['call_us']:.2f} µs/record (floor {figures['floor_us']:.2f} µs, "
        f"ratio {figures['call_ratio']:.1f}); thread {figures['thread_us']:.2f} µs/record "
        f"(plain sender {figures['plain_thread_us']:.2f} µs, ratio {figures['thread_ratio']:.2f}); "
        f"{figures['client_records_per_s']:,.0f} rec/s"
    )


if __name__ == "__main__":
    main()

"""Ingest throughput against PostgreSQL's COPY ceiling, measured in the same run.

    .venv/bin/python bench/ingest.py [--records 200000] [--batch 500] [--web-workers 2]
                                     [--clients 4] [--picks] [--pin-clients CPU]
                                     [--in-flight 1] [--prior-runs 0]

1. Recreates a scratch database (decisionboard_bench_ingest), migrates it, issues a key; with
   --prior-runs, the project already holds that many runs, as a long-lived one does.
2. Generates the demo records (records.demo.generator), or with --picks the peers' workload
   (tool-choice picks with 12 tools offered and ranked each), and serialises them into JSON batches
   up front.
3. Starts the product under gunicorn, waits for its workers to boot, opens one keep-alive
   connection per client spread evenly over the workers (bench.common.balanced_connections), and
   posts every batch from separate client processes: ingest rate = records / wall time of the
   posting. The clients run on the same cores as the server: their own CPU time is measured
   and reported, and --pin-clients keeps them all on one CPU.
4. COPYs the same rows, already normalised, into an empty table shaped like the records table.
5. Appends the figures as one JSON line to bench/results/ingest.jsonl (machine, commit).

Prints `ingest N rec/s, copy M rows/s, ratio R` as its last line (goal: R >= 0.5; with --picks
and one client, N >= 23,800: thirty times MLflow's 792 spans/s on the same picks).
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import platform
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    balanced_connections,
    child_pids,
    copy_ceiling,
    cpu_ticks,
    exit_on_signals,
    gunicorn,
    setup_django,
    store_rows,
)
from bench.results import commit  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "ingest.jsonl"
PEER_TOOLS = 12


def post_batches(args: tuple[int, str, list[bytes], int | None, int]) -> tuple[int, float]:
    """One client process: post its batches over its keep-alive connections (opened before the
    clients were forked, CONNECTIONS[index * in_flight:][:in_flight]), `in_flight` batches at a
    time, each connection from a thread of its own posting in order; returns the records
    accepted and the CPU seconds the client itself spent."""
    index, key, bodies, cpu, in_flight = args
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    cpu_start = time.process_time()
    connections = CONNECTIONS[index * in_flight : (index + 1) * in_flight]
    if in_flight == 1:
        accepted = post_in_order(connections[0], bodies, key)
    else:
        with ThreadPoolExecutor(in_flight) as threads:
            shares = [bodies[i::in_flight] for i in range(in_flight)]
            accepted = sum(threads.map(partial(post_in_order, key=key), connections, shares))
    return accepted, time.process_time() - cpu_start


def post_in_order(conn: http.client.HTTPConnection, bodies: list[bytes], key: str) -> int:
    """Post `bodies` one after the other over `conn`; the records accepted."""
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    accepted = 0
    for body in bodies:
        conn.request("POST", "/api/v1/records", body=body, headers=headers)
        response = conn.getresponse()
        payload = response.read()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {payload[:300]!r}")
        accepted += int(payload.split(b'"accepted":')[1].split(b",")[0])
    conn.close()
    return accepted


# The clients' connections, opened by the bench before it forks the clients (each uses its own).
CONNECTIONS: list[http.client.HTTPConnection] = []


def peer_picks(count: int, end: datetime, seed: int = 7) -> list[dict]:
    """The peers' comparison workload: `count` tool-choice picks, each offering and ranking
    PEER_TOOLS tools, a run of ten picks after another, a second apart."""
    rng = random.Random(seed)
    tools = [f"tool_{n:02d}" for n in range(PEER_TOOLS)]
    start = end.timestamp() - count
    picks = []
    for i in range(count):
        scores = sorted((round(rng.random(), 3) for _ in tools), reverse=True)
        order = rng.sample(tools, len(tools))
        ranked = [{"name": n, "score": s} for n, s in zip(order, scores, strict=True)]
        ts = datetime.fromtimestamp(start + i, UTC).isoformat().replace("+00:00", "Z")
        data = {
            "kind": "pick",
            "iteration": i % 10,
            "source": "classifier",
            "classifier": {"name": "openai", "model": "gpt-5-mini"},
            "offered": tools,
            "ranked": ranked,
            "chosen": ranked[0]["name"],
            "confidence": ranked[0]["score"],
            "usage": {"inputTokens": 1100 + i % 97, "outputTokens": 10},
            "latencyMs": round(rng.uniform(60, 400), 1),
            "served": tools,
            "narrowed": False,
        }
        picks.append(
            {
                "id": f"peer-pick-{i}",
                "kind": "tool_choice.pick",
                "run_id": f"peer-run-{i // 10}",
                "ts": ts,
                "agent": "peer-agent",
                "data": data,
            }
        )
    return picks


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU time of these processes so far (0 for one that has exited)."""
    return sum(cpu_ticks(pid) for pid in pids) / os.sysconf("SC_CLK_TCK")


def server_pids(master: int) -> tuple[list[int], list[int]]:
    """The gunicorn workers under `master`, and the database's other backends (theirs)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        )
        backends = [pid for (pid,) in cursor.fetchall()]
    return child_pids(master), backends


def seed_runs(project_id: int, count: int) -> None:
    """`count` runs of a project, as its earlier records left them (no statistics collected,
    as on a database that nobody has analysed since)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO records_run (project_id, run_id, agent, first_ts, last_ts, "
            "record_count, created_at, kind_counts, models_seen, has_swap, has_fallback, "
            "has_error, has_contract_break, has_violation) "
            "SELECT %s, 'earlier-' || g, 'bench', now(), now(), 1, now(), '{}', '{}', "
            "false, false, false, false, false FROM generate_series(1, %s) AS g",
            [project_id, count],
        )
    print(f"the project holds {count:,} runs before the posting", flush=True)


def machine() -> dict:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {"host": platform.node(), "cpu": model, "cores": os.cpu_count()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument(
        "--in-flight",
        type=int,
        default=1,
        help="batches each client keeps in flight, each on a connection of its own",
    )
    parser.add_argument(
        "--picks", action="store_true", help="post the peers' workload instead of the demo's"
    )
    parser.add_argument(
        "--pin-clients", type=int, metavar="CPU", help="run every client on this CPU alone"
    )
    parser.add_argument(
        "--prior-runs", type=int, default=0, help="runs the project holds before the posting"
    )
    args = parser.parse_args()
    exit_on_signals()  # a killed run stops its gunicorn and Celery children

    setup_django("decisionboard_bench_ingest")
    import orjson

    from records.contract.normalise import normalise
    from records.demo.generator import generate_records
    from records.models import ApiKey, Project, Record

    project = Project.objects.create(name="bench")
    _, key = ApiKey.issue(project, ApiKey.Scope.INGEST)
    if args.prior_runs:
        seed_runs(project.pk, args.prior_runs)
    end = datetime.now(UTC).replace(microsecond=0)
    if args.picks:
        records = peer_picks(args.records, end)
    else:
        records = list(
            generate_records(
                records=args.records, runs=max(1, args.records // 100), seed=7, end=end
            )
        )
    bodies = [
        orjson.dumps({"records": records[i : i + args.batch]})
        for i in range(0, len(records), args.batch)
    ]
    print(
        f"{len(records):,} demo records, {sum(map(len, bodies)) / len(records):.0f} bytes "
        f"each as JSON, in {len(bodies):,} batches of {args.batch}",
        flush=True,
    )

    with gunicorn(args.web_workers) as (port, master):
        # Round-robin, so that every client posts a similar mix of batches.
        shares = [
            (i, key, bodies[i :: args.clients], args.pin_clients, args.in_flight)
            for i in range(args.clients)
        ]
        CONNECTIONS[:] = balanced_connections(port, master, args.clients * args.in_flight)
        load_before = os.getloadavg()[0]
        pool = multiprocessing.get_context("fork").Pool(args.clients)
        try:
            workers, _ = server_pids(master.pid)
            web_cpu = -cpu_seconds(workers)
            start = time.perf_counter()
            answers = pool.map(post_batches, shares)
            ingest_seconds = time.perf_counter() - start
            # The backends of the workers' threads are opened by the posting itself.
            workers, backends = server_pids(master.pid)
            web_cpu += cpu_seconds(workers)
            db_cpu = cpu_seconds(backends)
        finally:
            # close and join, not terminate (the `with` block's exit): a client killed while
            # waiting on the pool's task queue can hold its lock and hang the terminate.
            pool.close()
            pool.join()
            for conn in CONNECTIONS:
                conn.close()
    accepted = sum(n for n, _ in answers)
    client_cpu = sum(cpu for _, cpu in answers)
    stored = Record.objects.filter(project=project).count()
    if accepted != len(records) or stored != len(records):
        raise SystemExit(f"accepted {accepted:,}, stored {stored:,} of {len(records):,}")
    ingest_rate = len(records) / ingest_seconds
    cores = len(os.sched_getaffinity(0))
    client_share = client_cpu / (ingest_seconds * cores)
    # What the server would have done with the clients' CPU given back: the posting's wall time
    # less the clients' CPU spread over the cores. An estimate, for a machine the clients share.
    spared_rate = len(records) / max(ingest_seconds - client_cpu / cores, 1e-9)
    pinned = f", clients pinned to CPU {args.pin_clients}" if args.pin_clients is not None else ""
    print(
        f"posted with {args.clients} clients, {args.in_flight} batches in flight each, to "
        f"{args.web_workers} gunicorn workers "
        f"in {ingest_seconds:.1f} s{pinned}; the clients used {client_cpu:.1f} CPU s "
        f"({client_share:.0%} of {cores} cores), load {load_before:.1f}",
        flush=True,
    )
    per_record = 1e6 / len(records)
    print(
        f"CPU per record: web workers {web_cpu * per_record:.0f} µs, their database backends "
        f"{db_cpu * per_record:.0f} µs, clients {client_cpu * per_record:.0f} µs",
        flush=True,
    )

    now = datetime.now(UTC)
    rows = store_rows(project.pk, now, (normalise(r, now=now) for r in records))
    copy_rate = copy_ceiling(rows)
    print(
        f"without the clients' CPU: ingest ~{spared_rate:,.0f} rec/s, "
        f"ratio ~{spared_rate / copy_rate:.2f}",
        flush=True,
    )
    RESULTS.parent.mkdir(exist_ok=True)
    with RESULTS.open("a") as results:
        line = {
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": machine(),
            "commit": commit(),
            "workload": "picks" if args.picks else "demo",
            "records": len(records),
            "batch": args.batch,
            "web_workers": args.web_workers,
            "clients": args.clients,
            "in_flight": args.in_flight,
            "pinned_cpu": args.pin_clients,
            "prior_runs": args.prior_runs,
            "load": round(load_before, 2),
            "ingest_seconds": round(ingest_seconds, 3),
            "ingest_rate": round(ingest_rate),
            "client_cpu_seconds": round(client_cpu, 3),
            "web_cpu_seconds": round(web_cpu, 3),
            "db_cpu_seconds": round(db_cpu, 3),
            "copy_rate": round(copy_rate),
            "ratio": round(ingest_rate / copy_rate, 3),
            "ratio_without_client_cpu": round(spared_rate / copy_rate, 3),
        }
        results.write(json.dumps(line) + "\n")
    print(
        f"ingest {ingest_rate:,.0f} rec/s, copy {copy_rate:,.0f} rows/s, "
        f"ratio {ingest_rate / copy_rate:.2f}"
    )


if __name__ == "__main__":
    main()

"""The catch-up's fan-in past one PostgreSQL, simulated: how many shards, lanes and worker
processes keep the rollup lag under the goal at 1x, 10x and 100x today's rate.

    .venv/bin/python bench/scale_sim.py [--base-rate 3000] [--lane-rate R] [--lane-cpu-share S]
                                        [--node-cores 16] [--projects 500] [--seconds 600]

No database: a model fed with figures measured here (docs/scaling.md says where each comes from).

- A lane folds at most `lane-rate` records/s (bench/scale.py, one lane alone). Of each record's
  time, `lane-cpu-share` is the worker's own CPU; the rest is PostgreSQL's (the upserts, reads and
  COPY of the pass), so a record costs the database node (1 - share) / lane-rate core-seconds,
  and its ingest 1 / `copy-rate` more (the COPY ceiling, bench.common.copy_ceiling).
- Records arrive at `rate` records/s (+-20 % over the period, a 60 s burst at 1.5x, 5 % noise per
  second), from `projects` projects whose sizes follow a Zipf law (exponent `skew`): a few large
  tenants, many small ones. Projects are spread over shards by hash (Citus, distributed by
  project_id), and within a shard over its lanes by id (records.catchup.lanes.lane_of).
- Each second, every database node spends its cores on ingest first, the rest on its lanes'
  passes (shared in proportion when short); a lane folds what it can of its backlog. A record's
  lag is the backlog ahead of it over the lane's rate, plus the nudge's 1 s debounce
  (workers.dispatch). The lag goal is p95 < 5 s, with the database nodes at most
  `headroom` busy.

For each rate it searches the fewest shards (database nodes) whose cores cover ingest and
catch-up within the headroom, then the fewest lanes per shard that meet the lag goal, and
prints them with the worker processes and cores, the lag p95 and the largest backlog. A project
bigger than one lane's rate cannot be split by project lanes: that is printed as the limit.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results import record_result  # noqa: E402

# Measured on this machine (2 cores, PostgreSQL 15, autovacuum off, other work running):
# bench/scale.py on backlogs of 300,000-400,000 demo records over 8 projects; the
# median of five one-lane runs (10.6k-22.4k records/s) and of their own-CPU shares (29-49 %).
LANE_RATE = 16_000.0
LANE_CPU_SHARE = 0.39
COPY_RATE = 35_600.0  # rows/s of COPY into the records table (bench.common.copy_ceiling)
LAG_GOAL = 5.0
DEBOUNCE = 1.0


@dataclass
class Outcome:
    shards: int
    lanes_per_shard: int
    lag_p95: float
    max_backlog: int
    db_busy: float  # the nodes' average share of their cores
    worker_cores: float


def project_rates(projects: int, skew: float, rate: float) -> list[float]:
    weights = [1 / (rank**skew) for rank in range(1, projects + 1)]
    total = sum(weights)
    return [rate * w / total for w in weights]


def shard_of(project: int, shards: int) -> int:
    return zlib.crc32(project.to_bytes(8, "little")) % shards  # Citus: a hash of project_id


def simulate(args, rate: float, shards: int, lanes_per_shard: int, split: bool) -> Outcome:
    rng = random.Random(7)
    rates = project_rates(args.projects, args.skew, rate)
    ids = list(range(1, args.projects + 1))
    rng.shuffle(ids)  # project ids are handed out as tenants arrive, not by size
    lane_share: dict[tuple[int, int], float] = {}
    for project_id, share in zip(ids, rates, strict=True):
        # Sub-project lanes (docs/scaling.md): a project above a quarter of a lane's rate (room
        # for the burst) is dealt by run
        # over several lanes of its own shard; otherwise a project is one lane's.
        pieces = math.ceil(share / (args.lane_rate / 4)) if split else 1
        for piece in range(pieces):
            key = (shard_of(project_id, shards), (project_id + piece) % lanes_per_shard)
            lane_share[key] = lane_share.get(key, 0.0) + share / pieces
    db_per_record = (1 - args.lane_cpu_share) / args.lane_rate
    ingest_per_record = 1 / args.copy_rate
    backlog = dict.fromkeys(lane_share, 0.0)
    lags: list[tuple[float, float]] = []  # (lag, records)
    busy: list[float] = []  # each node's share of its cores, each second
    most = 0.0  # the largest backlog of any lane at any second
    for second in range(args.seconds):
        level = 1 + 0.2 * math.sin(2 * math.pi * second / args.seconds)
        if args.seconds // 2 <= second < args.seconds // 2 + 60:
            level *= 1.5
        arrived = {k: max(0.0, s * level * rng.gauss(1, 0.05)) for k, s in lane_share.items()}
        for shard in range(shards):
            mine = [k for k in lane_share if k[0] == shard]
            ingest = sum(arrived[k] for k in mine) * ingest_per_record
            spare = max(0.0, args.node_cores - ingest)
            wanted = {k: min(backlog[k] + arrived[k], args.lane_rate) for k in mine}
            cost = sum(wanted.values()) * db_per_record
            scale = min(1.0, spare / cost) if cost else 1.0
            busy.append(min(1.0, (ingest + cost * scale) / args.node_cores))
            for k in mine:
                done = wanted[k] * scale
                backlog[k] = backlog[k] + arrived[k] - done
                most = max(most, backlog[k])
                waiting = backlog[k] / max(done, 1e-9) if backlog[k] > 1 else 0.0
                lags.append((DEBOUNCE + waiting, arrived[k]))
    lags.sort()
    total = sum(n for _, n in lags)
    seen, p95 = 0.0, lags[-1][0]
    for lag, n in lags:
        seen += n
        if seen >= 0.95 * total:
            p95 = lag
            break
    worker_cores = rate * args.lane_cpu_share / args.lane_rate  # the lanes' own CPU, on average
    return Outcome(shards, lanes_per_shard, p95, int(most),
                   sum(busy) / len(busy), worker_cores)  # fmt: skip


def plan(args, rate: float, split: bool) -> Outcome | None:
    """The fewest shards, then the fewest lanes per shard, meeting the lag goal with the nodes
    on average at most `headroom` busy."""
    per_record = (1 - args.lane_cpu_share) / args.lane_rate + 1 / args.copy_rate
    fewest = max(1, math.ceil(rate * per_record / (args.node_cores * args.headroom)))
    for shards in range(fewest, fewest + 8):
        # Fewer lanes than the rate over a lane's cannot keep up; the lag falls as lanes are
        # added until the node is short, so the first that meets the goal is found by halving.
        low = max(1, math.floor(rate / shards / args.lane_rate))
        high = max(low, math.ceil(4 * rate / shards / args.lane_rate) + 1)
        best = None
        while low <= high:
            middle = (low + high) // 2
            out = simulate(args, rate, shards, middle, split)
            if out.lag_p95 < LAG_GOAL and out.db_busy <= args.headroom:
                best, high = out, middle - 1
            else:
                low = middle + 1
        if best is not None:
            return best
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--base-rate",
        type=float,
        default=3_000.0,
        help="today's sustained rate, records/s (bench/soak.py keeps up at it)",
    )
    parser.add_argument("--scales", default="1,10,100")
    parser.add_argument("--lane-rate", type=float, default=LANE_RATE)
    parser.add_argument("--lane-cpu-share", type=float, default=LANE_CPU_SHARE)
    parser.add_argument("--copy-rate", type=float, default=COPY_RATE)
    parser.add_argument("--node-cores", type=float, default=16)
    parser.add_argument("--headroom", type=float, default=0.7)
    parser.add_argument("--projects", type=int, default=500)
    parser.add_argument("--skew", type=float, default=1.1)
    parser.add_argument("--seconds", type=int, default=300)
    args = parser.parse_args()  # fmt: skip

    print(f"one lane: {args.lane_rate:,.0f} records/s, {args.lane_cpu_share:.0%} of it the "
          f"worker's CPU; database nodes of {args.node_cores:g} cores, at most "
          f"{args.headroom:.0%} busy; {args.projects} projects, Zipf {args.skew}")  # fmt: skip
    figures: dict = {"options": vars(args), "scales": {}}
    for scale in (float(s) for s in args.scales.split(",")):
        rate = args.base_rate * scale
        biggest = project_rates(args.projects, args.skew, rate)[0]
        print(f"\n{scale:g}x today = {rate:,.0f} records/s ({rate * 86400 / 1e9:,.2f} billion a "
              f"day); the largest project sends {biggest:,.0f}/s")  # fmt: skip
        scaled = figures["scales"][f"{scale:g}"] = {"rec_s": rate, "largest_project_rec_s": biggest}
        per_record = (1 - args.lane_cpu_share) / args.lane_rate + 1 / args.copy_rate
        if biggest * per_record > args.node_cores * args.headroom:
            print(f"  LIMIT: the largest project alone needs {biggest * per_record:.1f} cores of "
                  "its database node (its shard is one node's): a bigger node, or the project "
                  "on a node of its own (Citus tenant isolation)")  # fmt: skip
            scaled["largest_project_node_cores"] = biggest * per_record
        if biggest > args.lane_rate * args.headroom:
            print(f"  LIMIT: the largest project alone needs {biggest / args.lane_rate:.1f} "
                  "lanes; lanes by project cannot split it (docs/scaling.md)")  # fmt: skip
            scaled["largest_project_lanes"] = biggest / args.lane_rate
        for split in (False, True) if biggest > args.lane_rate / 2 else (False,):
            out = plan(args, rate, split)
            how = "sub-project lanes" if split else "project lanes"
            if out is None:
                print(f"  {how}: no plan meets the lag goal within 8 more shards")
                scaled[how] = None
                continue
            lanes = out.shards * out.lanes_per_shard
            print(f"  {how}: {out.shards} shard(s) x {out.lanes_per_shard} lane(s) = {lanes} "
                  f"lanes = {lanes} worker processes (~{out.worker_cores:.1f} cores of their "
                  f"own); database {out.shards * args.node_cores:g} cores, {out.db_busy:.0%} "
                  f"busy; lag p95 {out.lag_p95:.1f} s (goal < {LAG_GOAL:g}), largest lane "
                  f"backlog {out.max_backlog:,} records")  # fmt: skip
            scaled[how] = {
                "shards": out.shards,
                "lanes_per_shard": out.lanes_per_shard,
                "worker_cores": out.worker_cores,
                "db_busy": out.db_busy,
                "lag_p95_s": out.lag_p95,
                "max_backlog": out.max_backlog,
            }
    record_result("scale_sim", figures)


if __name__ == "__main__":
    main()

"""Decisionboard on one set of processes against two, and pages on a replica against the primary.

    .venv/bin/python bench/scale_out.py [--records 20000] [--page-requests 40]

On a private PostgreSQL cluster (initdb, on a free port; its own Redis), so that the database's
CPU is the benchmark's alone:

1. One "host" (gunicorn with 2 workers, a `default` worker with 2 slots, 2 catch-up lanes),
   then two such hosts (own var folders and DECISIONBOARD_HOSTNAME, one beat) on a fresh
   database each: clients post `records` out-of-order records to the hosts' web servers in
   turn. Printed: the ingest rate (all acknowledged), the end-to-end rate (all folded into the
   rollups), and the CPU seconds of each host's processes and of PostgreSQL (the postmaster and
   its backends) over the run.
2. A streaming standby (pg_basebackup -R) of the cluster, and two web servers, one reading it
   (DATABASE_REPLICA_URL) and one the primary alone: while a client posts records, the p95 of
   the overview page and the metrics API on each.

Both "hosts" run on this machine, so the second adds processes, not cores: the comparison
says what the processes cost and whether two sets of them get in each other's way, not what
a second machine would add. Figures go to bench/results/scale_out.jsonl.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg  # noqa: E402
import requests  # noqa: E402

from bench.common import exit_on_signals  # noqa: E402
from bench.results import record_result  # noqa: E402
from config.queues import Queue  # noqa: E402
from tests.support import rollup_data  # noqa: E402
from tests.support.live import PrivateCluster, postgres_bin, redis_server, wait_until  # noqa: E402
from tests.support.standby import SETUP  # noqa: E402
from workers import processes  # noqa: E402

PROJECTS = ("acme", "globex", "initech", "umbrella")
BATCH = 200
CLIENTS = 4
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """CPU time of `pid` and its descendants, those already reaped included (their parents'
    cutime and cstime)."""
    total = 0
    for each in (pid, *processes.descendants(pid)):
        try:
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
    return total / TICK


def manage(env: dict, *args: str) -> str:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=processes.BASE_DIR, env=env, check=True,
        capture_output=True, text=True, timeout=600,
    ).stdout  # fmt: skip


def corpus(records: int) -> dict[str, list[dict]]:
    """`records` records over the projects, each project's in shuffled time order."""
    each = records // len(PROJECTS)
    return {name: rollup_data.build(each, seed=seed)[:each] for seed, name in enumerate(PROJECTS)}


def post_all(bases: list[str], keys: dict[str, str], data: dict[str, list[dict]]) -> float:
    """Post every record from CLIENTS threads, batch by batch, to the web servers in turn;
    returns the seconds until the last was acknowledged."""
    batches = [
        (name, records[i : i + BATCH])
        for name, records in data.items()
        for i in range(0, len(records), BATCH)
    ]
    failures: list[str] = []

    def client(number: int) -> None:
        for k, (name, batch) in enumerate(batches[number::CLIENTS]):
            base = bases[(number + k) % len(bases)]
            answer = requests.post(
                f"{base}/api/v1/records", json={"records": batch},
                headers={"Authorization": f"Bearer {keys[name]}"}, timeout=120,
            )  # fmt: skip
            if answer.status_code != 200:
                failures.append(answer.text[:200])

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError(f"{len(failures)} batches refused: {failures[0]}")
    return time.monotonic() - started


def folded(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        newest = conn.execute("SELECT coalesce(max(id), 0) FROM records_record").fetchone()[0]
        lowest = conn.execute(
            "SELECT min(last_id) FROM records_watermark WHERE name LIKE 'rollups%'"
        ).fetchone()[0]
    return lowest is not None and lowest >= newest


def fresh_database(cluster: PrivateCluster, name: str, env: dict) -> dict[str, str]:
    cluster.execute("postgres", f"CREATE DATABASE {name}")
    manage(env, "migrate", "-v", "0")
    keys = manage(env, "shell", "-c", f"NAMES = {list(PROJECTS)!r}\n{SETUP}").split()
    return dict(zip(PROJECTS, keys[-len(PROJECTS) :], strict=True))


def host_env(base_env: dict, url: str, var: Path, host: str) -> dict:
    var.mkdir(parents=True, exist_ok=True)
    return {**base_env, "DATABASE_URL": url, "DECISIONBOARD_VAR_DIR": str(var),
            "DECISIONBOARD_HOSTNAME": host}  # fmt: skip


def run_hosts(cluster, base_env, work: Path, hosts: int, data) -> dict:
    """Ingest and catch-up of `data` on `hosts` sets of processes; their figures."""
    name = f"scale_out_{hosts}"
    url = cluster.url(name)
    envs = [host_env(base_env, url, work / f"{name}-{h}", f"host-{h}") for h in range(hosts)]
    keys = fresh_database(cluster, name, envs[0])
    postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
    with ExitStack() as stack:
        bases, roots = [], []
        for h, env in enumerate(envs):
            port = processes.free_port()
            web = stack.enter_context(processes.running(
                processes.web_command(f"127.0.0.1:{port}", 2, "--log-level", "warning"),
                env=env, log=work / f"{name}-web-{h}.log"))  # fmt: skip
            beat = {"beat_schedule": work / f"{name}-beat"} if h == 0 else {}
            worker = stack.enter_context(processes.running(
                processes.worker_command([Queue.DEFAULT], 2, name="default", host=f"host-{h}",
                                         loglevel="WARNING", **beat),
                env=env, log=work / f"{name}-worker-{h}.log"))  # fmt: skip
            bases.append(f"http://127.0.0.1:{port}")
            roots.append((web.pid, worker.pid))
        for base in bases:
            wait_until(lambda b=base: requests.get(f"{b}/accounts/login/", timeout=5).ok, 60,
                       "web")  # fmt: skip
        time.sleep(3)  # the workers ready
        before = [(cpu_seconds(w), cpu_seconds(k)) for w, k in roots]
        db_before = cpu_seconds(postmaster)
        started = time.monotonic()
        ingest_seconds = post_all(bases, keys, data)
        wait_until(lambda: folded(url), 600, "the catch-up")
        total_seconds = time.monotonic() - started
        after = [(cpu_seconds(w), cpu_seconds(k)) for w, k in roots]
        db_cpu = cpu_seconds(postmaster) - db_before
    records = sum(len(r) for r in data.values())
    return {
        "records": records,
        "ingest_per_s": round(records / ingest_seconds),
        "end_to_end_per_s": round(records / total_seconds),
        "seconds": round(total_seconds, 1),
        "hosts_cpu_s": [
            {"web": round(a[0] - b[0], 1), "workers": round(a[1] - b[1], 1)}
            for a, b in zip(after, before, strict=True)
        ],
        "database_cpu_s": round(db_cpu, 1),
    }


def p95(samples: list[float]) -> float:
    return round(statistics.quantiles(samples, n=20)[-1] * 1000, 1) if len(samples) > 1 else 0.0


def page_latency(cluster, standby, base_env, work: Path, data, requests_each: int) -> dict:
    """p95 ms of the overview and the metrics API on a web server reading the standby and on
    one reading the primary, sampled in turn while a client posts `data`."""
    name = "scale_out_1"  # folded by run_hosts: pages with data
    url = cluster.url(name)
    env = host_env(base_env, url, work / "pages", "pages")
    keys = dict(zip(PROJECTS, manage(env, "shell", "-c", (
        "from records.models import ApiKey, Project\n"
        f"for n in {list(PROJECTS)!r}: print(ApiKey.issue(Project.objects.get(name=n), "
        "ApiKey.Scope.ALL)[1])")).split()[-len(PROJECTS):], strict=True))  # fmt: skip
    replica_env = {**env, "DATABASE_REPLICA_URL": standby.url(name)}
    with ExitStack() as stack:
        bases = {}
        for label, e in (("replica", replica_env), ("primary", env)):
            port = processes.free_port()
            stack.enter_context(processes.running(
                processes.web_command(f"127.0.0.1:{port}", 2, "--log-level", "warning"),
                env=e, log=work / f"pages-{label}.log"))  # fmt: skip
            bases[label] = f"http://127.0.0.1:{port}"
        sessions = {}
        for label, base in bases.items():
            wait_until(lambda b=base: requests.get(f"{b}/accounts/login/", timeout=5).ok, 60,
                       "web")  # fmt: skip
            session = requests.Session()
            session.get(f"{base}/accounts/login/", timeout=10)
            session.post(f"{base}/accounts/login/", timeout=10, data={
                "username": "alice", "password": "pw-alice",
                "csrfmiddlewaretoken": session.cookies["csrftoken"]})  # fmt: skip
            session.cookies.pop("decisionboard_wal", None)  # the login's pin: read as anyone
            sessions[label] = session
        loading = threading.Thread(target=post_all, args=([bases["primary"]], keys, data))
        loading.start()
        samples = {(label, page): [] for label in bases for page in ("overview", "metrics")}
        metrics = ("/api/v1/metrics/pick_error_rate?from=2026-11-20T00:00:00Z"
                   "&to=2026-11-21T00:00:00Z&interval=hour&group_by=model")  # fmt: skip
        for _ in range(requests_each):
            for label, base in bases.items():
                for page, path, headers in (
                    ("overview", "/", {}),
                    ("metrics", metrics, {"Authorization": f"Bearer {keys['acme']}"}),
                ):
                    started = time.perf_counter()
                    answer = sessions[label].get(base + path, headers=headers, timeout=60)
                    answer.raise_for_status()
                    samples[(label, page)].append(time.perf_counter() - started)
        loading.join()
    return {f"{page}_p95_ms_{label}": p95(s) for (label, page), s in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--page-requests", type=int, default=40)
    args = parser.parse_args()
    exit_on_signals()
    bin_dir = postgres_bin()
    if bin_dir is None:
        sys.exit("PostgreSQL server binaries (/usr/lib/postgresql/*/bin) are needed")
    work = Path(tempfile.mkdtemp(prefix="decisionboard-scale-out-"))
    os.chmod(work, 0o755)
    (work / "primary").mkdir()
    cluster = PrivateCluster(bin_dir, work / "primary", processes.free_port())
    standby = None
    redis_port = processes.free_port()
    base_env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_REPLICA_URL",)}
    base_env.update(REDIS_URL=f"redis://127.0.0.1:{redis_port}/0",
                    DECISIONBOARD_CATCHUP_LANES="2", DECISIONBOARD_NUDGE_WORKERS="1")  # fmt: skip
    try:
        cluster.init()
        cluster.start("max_connections=100", "shared_buffers=128MB")
        with redis_server(redis_port, work / "redis.log"):
            data = corpus(args.records)
            one = run_hosts(cluster, base_env, work, 1, data)
            print("one host: ", one)
            two = run_hosts(cluster, base_env, work, 2, data)
            print("two hosts:", two)
            (work / "standby").mkdir()
            standby = cluster.standby(work / "standby", processes.free_port())
            standby.start("max_connections=100", "hot_standby_feedback=on")  # as the primary
            more = {n: [dict(r, id=f"more-{r['id']}") for r in rs] for n, rs in data.items()}
            pages = page_latency(cluster, standby, base_env, work, more, args.page_requests)
            print("pages:    ", pages)
    finally:
        for each in (standby, cluster):
            if each is not None and each.data.exists() and each.running():
                each.stop("immediate")
        shutil.rmtree(work, ignore_errors=True)
    path = record_result(
        "scale_out", {"one_host": one, "two_hosts": two, "pages_during_ingest": pages,
                      "cores": os.cpu_count()},
    )  # fmt: skip
    print(f"recorded in {path}")


if __name__ == "__main__":
    main()

"""Benchmark results as data: one JSON line per run in bench/results/<bench>.jsonl.

Each line is {"bench", "time", "machine", "commit", "figures"}: the figures a bench prints (its
ratio, its ceiling, its measured values), with the machine and the commit they were measured
on, so that runs can be compared by a program instead of read out of prose. Standard library
only: a bench without a database (bench/scale_sim.py) records its figures too.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = RESULTS.parent.parent


def record_result(bench: str, figures: dict) -> Path:
    """Append this run's `figures` of `bench` to bench/results/<bench>.jsonl; the file's path."""
    line = {
        "bench": bench,
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "commit": commit(),
        "figures": figures,
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{bench}.jsonl"
    with path.open("a") as out:
        out.write(json.dumps(line, default=str) + "\n")
    return path


def machine() -> dict:
    """The platform, CPU model, cores and memory of the machine the bench ran on."""
    return {
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_bytes": _memory_bytes(),
    }


def commit() -> str | None:
    """HEAD's short hash, with "-dirty" when the work tree differs from it; None outside git."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        # bench/results/ itself is left out: a run's own line must not make the next one dirty.
        dirty = git("status", "--porcelain", "--", ".", ":(exclude)bench/results")
    except (OSError, subprocess.CalledProcessError):
        return None
    return f"{head}-dirty" if dirty else head


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None

"""The sample records shipped in examples/, shifted in time so that they show on the pages'
default time range (`manage.py load_examples`)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path

import orjson
from django.utils.dateparse import parse_datetime

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "records.jsonl"


def read(path: Path = EXAMPLES) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def shifted(records: Iterable[dict], newest: datetime) -> list[dict]:
    """The records with every `ts` moved by one offset, so that the newest is `newest`: their
    order and spacing (a run's timeline, a streak) stay as written."""
    records = list(records)
    times = [parse_datetime(r["ts"]) for r in records]
    if any(t is None for t in times):
        raise ValueError("every example needs an RFC 3339 ts")
    delta: timedelta = newest - max(times)
    return [
        {**r, "ts": (t + delta).isoformat().replace("+00:00", "Z")}
        for r, t in zip(records, times, strict=True)
    ]

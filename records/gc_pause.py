"""Python's cyclic garbage collector paused around work that makes many objects and keeps them
to its end: a catch-up pass (millions of objects, hundreds of thousands kept), the mapping of an
OTLP export (dozens a span) and a posted batch of records (dozens a record). The collector
walked them again and again, a real share of each (bench/catchup.py, bench/otlp.py,
bench/ingest.py). None of them is in a cycle: reference counting frees them as ever, and the
collector, back on after, finds any cycle made meanwhile."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """The collector off for the block; a thread that finds it paused leaves it to the one
    that paused it."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()

"""Give the memory a finished task freed back to the system (glibc's malloc_trim), then have the
memory bound judge what the process holds now, not what it once held (Linux's clear_refs).

A catch-up pass builds hundreds of thousands of small objects (cells, runs, decisions) and frees
them at its end; glibc keeps the freed pages in the pool process's heap for the next allocation,
so the process's resident size stayed at its largest pass's and crept up as passes of different
sizes fragmented it. malloc_trim(0) returns the free pages at the heap's top and in its middle
(MADV_DONTNEED), cheaply. Where libc is not glibc (musl, macOS) there is nothing to call and
nothing is done. It does not make the soak's worker flat on its own (bench/soak.py prints the
workers' memory).

Celery's worker_max_memory_per_child (billiard) replaces a pool process after a task when its
*peak* resident size (getrusage's ru_maxrss) is above the bound: every large pass got its
process replaced, so the bound had to sit above the largest pass, far above what a process keeps
between tasks, and a process that grew slowly under it was never replaced. Writing "5" to
/proc/self/clear_refs resets that peak to the current resident size; done after the trim, at
the end of every task and before billiard's check, the bound applies to what the process keeps
between tasks. Where the file does not exist (not Linux) the peak stays, as Celery has it.
"""

from __future__ import annotations

import ctypes
import ctypes.util


def _malloc_trim():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_TRIM = _malloc_trim()


def give_back_freed_memory() -> bool:
    """Return the heap's free pages to the system; whether it could (glibc only)."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


def forget_peak_memory() -> bool:
    """Make the process's peak resident size (ru_maxrss) its current one; whether it could."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return False
    return True

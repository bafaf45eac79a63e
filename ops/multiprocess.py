"""Counting across processes: one metrics folder per machine that every process writes into.

gunicorn runs several processes and Celery a pool of them, and each counts what it does.
prometheus-client's multiprocess mode gives each process its own memory-mapped file in one
folder (PROMETHEUS_MULTIPROC_DIR) and sums the files when /metrics is read. Its documented
limits shape what is counted this way: counters and histograms only. Every gauge of /metrics is
read from the database or the broker when it is scraped (ops.state), so no process-local gauge
goes stale when its process dies.

The library asks for the folder to be wiped between runs; here it is not, so that counters stay
monotonic across restarts. Instead a dead process's files are folded into one archive file per
type (`counter_archive.db`), so that the folder does not grow by a file for every process that
gunicorn's `max_requests` or Celery's `max_memory_per_child` replaces. Folding happens when
gunicorn's master sees a worker exit (gunicorn.conf.py), when a Celery pool process exits
(ops.apps), and on every scrape for files whose process is gone (killed, say). A file lock
keeps a scrape from reading a file and its archived copy at once.

The folder is chosen by config.metrics_folder, before anything imports prometheus_client (the
library picks its per-process storage when it is imported). Nothing here imports Django.
"""

from __future__ import annotations

import fcntl
import glob
import logging
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

# The types whose files hold plain sums (a histogram's buckets are stored per bucket, not
# cumulated), so that adding one file's values into another's is exact.
_SUMMED_TYPES = ("counter", "histogram", "summary")
_PROCESS_FILE = re.compile(rf"^({'|'.join(_SUMMED_TYPES)})_(\d+)\.db$")
ARCHIVE = "archive"

log = logging.getLogger(__name__)


def folder() -> Path:
    return Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])


@contextmanager
def _locked(path: Path, *, exclusive: bool) -> Iterator[None]:
    with open(path / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def process_files(path: Path) -> dict[int, list[Path]]:
    """The per-process files in `path`, by process id (the archive files excluded)."""
    found: dict[int, list[Path]] = {}
    for name in os.listdir(path):
        match = _PROCESS_FILE.match(name)
        if match:
            found.setdefault(int(match.group(2)), []).append(path / name)
    return found


def fold(pid: int, path: Path | None = None) -> int:
    """Add process `pid`'s counts into the archive files and delete its own; returns how many
    files it folded. Only for a process that has exited (or is exiting and counts no more)."""
    from prometheus_client.mmap_dict import MmapedDict

    path = path or folder()
    folded = 0
    with _locked(path, exclusive=True):
        for file in process_files(path).get(pid, []):
            kind = file.name.split("_", 1)[0]
            values = list(MmapedDict.read_all_values_from_file(str(file)))
            archive = MmapedDict(str(path / f"{kind}_{ARCHIVE}.db"))
            try:
                for key, value, _timestamp, _pos in values:
                    current, _ = archive.read_value(key)
                    archive.write_value(key, current + value, 0.0)
            finally:
                archive.close()
            file.unlink()
            folded += 1
    return folded


# Process ids whose exit a signal handler reported while an earlier fold of this process was
# under way (fold_exited).
_exited: list[int] = []
_folding = False


def fold_exited(pid: int) -> None:
    """fold(pid), for a caller that runs in a signal handler: gunicorn's master calls child_exit
    from its SIGCHLD handler, which Python runs between any two bytecodes of the master,
    including those of an earlier child_exit. The lock is held per open file, so a fold nested
    in another fold of the same process would wait for the lock its interrupted caller holds,
    forever, and the master would start no worker again (two workers replaced after a few
    requests each did this). A nested call leaves its pid to the fold it interrupted, which
    folds it before it returns. A failure is logged, and the exit goes on: the next scrape
    folds what is left. A Celery pool process folds its own counts with it as it exits."""
    global _folding
    _exited.append(pid)
    while _exited and not _folding:
        _folding = True
        try:
            while _exited:
                exited = _exited.pop(0)
                try:
                    fold(exited)
                except OSError as exc:
                    log.warning("could not fold the metrics of process %s: %s", exited, exc)
        finally:
            _folding = False


def fold_dead(path: Path | None = None) -> int:
    """Fold the files of every process that is gone; returns how many files it folded."""
    path = path or folder()
    return sum(
        fold(pid, path) for pid in process_files(path) if pid != os.getpid() and not _alive(pid)
    )


def collect(path: Path | None = None) -> Iterable:
    """Every counter and histogram of this machine's processes, live and exited, summed."""
    path = path or folder()
    fold_dead(path)
    return summed(path)


def summed(path: Path) -> list:
    """The files in `path` summed as they are, the dead processes' files included: read under
    the lock, since a process folding its file as it exits deletes it once archived."""
    from prometheus_client.multiprocess import MultiProcessCollector

    with _locked(path, exclusive=False):
        return list(MultiProcessCollector.merge(glob.glob(str(path / "*.db")), accumulate=True))


class FilesCollector:
    """A collector for a scrape's registry: the metrics folder's sums."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path

    def collect(self) -> Iterable:
        return collect(self.path)

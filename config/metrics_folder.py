"""Which folder this machine's processes count their metrics into (ops.multiprocess sums it).

`configure()` must run before anything imports prometheus_client (config/__init__.py): the
library picks its per-process storage when it is imported. Nothing here imports Django.
"""

from __future__ import annotations

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent


def default_folder(environ: dict | os._Environ = os.environ) -> Path:
    """DECISIONBOARD_METRICS_DIR, else `metrics/` in the var folder (as config.settings finds
    it). It must be on this machine's own disk: the files are memory-mapped."""
    explicit = environ.get("DECISIONBOARD_METRICS_DIR")
    if explicit:
        return Path(explicit).resolve()
    var = environ.get("DECISIONBOARD_VAR_DIR") or str(BASE_DIR / "var")
    return Path(var).resolve() / "metrics"


def configure(environ: dict | os._Environ = os.environ) -> Path:
    """Point prometheus-client at this machine's metrics folder, creating it.

    Set, not defaulted: a child process started with another var folder (a test's live server)
    counts into its own folder, not its parent's.
    """
    folder = default_folder(environ)
    folder.mkdir(parents=True, exist_ok=True)
    environ["PROMETHEUS_MULTIPROC_DIR"] = str(folder)
    return folder

"""The JavaScript projects the tests run, each installed with `npm ci` from its committed lock.

A project counts as installed when npm's own record of the install (node_modules/
.package-lock.json) is newer than the lock, so an install made before the tests (.ci/run makes
them while Python's packages install) is not made again. `python -m tests.support.node_packages`
installs them all.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECTS = (
    ROOT / "client-js",
    *(ROOT / "tests" / "agents_js" / f"ai_sdk{version}" for version in (4, 5, 6, 7)),
    ROOT / "tests" / "agents_js" / "langchain",
    ROOT / "tests" / "browser",
    ROOT / "tests" / "oidc_provider",
)


def is_installed(project: Path) -> bool:
    record = project / "node_modules" / ".package-lock.json"
    lock = project / "package-lock.json"
    return record.exists() and record.stat().st_mtime >= lock.stat().st_mtime


def install(project: Path) -> Path:
    """`project` with its node_modules as its lock pins them."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise RuntimeError("Node.js and npm are required (Node 20 or later)")
    if not is_installed(project):
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"],
            cwd=project,
            check=True,
            capture_output=True,
            timeout=600,
        )
    return project


if __name__ == "__main__":
    for each in PROJECTS:
        install(each)
        print(f"installed {each.relative_to(ROOT)}", file=sys.stderr)

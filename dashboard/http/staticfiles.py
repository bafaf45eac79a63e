"""Static files: hashed, compressed and long-cached once collected (no CDN).

`manage.py collectstatic` (bin/start runs it through `ensure_collected`) writes each file under a
name that carries its content hash, with a gzip copy beside it; WhiteNoise serves those names with
a year's max-age (a changed file gets a new name) and the gzip copy to a browser that takes it.

Before anything is collected (a checkout that never ran bin/start, the processes a test starts
with their own var/ folder) a page still works: `StaticStorage` then links the plain name, which
WhiteNoise serves from the finders with its short default max-age.
"""

from __future__ import annotations

import fcntl
from pathlib import Path

from django.conf import settings
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.templatetags.static import static
from whitenoise.storage import CompressedManifestStaticFilesStorage

MANIFEST = "staticfiles.json"


class StaticStorage(CompressedManifestStaticFilesStorage):
    # A name missing from the manifest is linked as it is (see the module docstring) rather than
    # failing the page; Django's non-strict mode would instead hash a file that is not there.
    manifest_strict = False

    def stored_name(self, name: str) -> str:
        try:
            return super().stored_name(name)
        except ValueError:
            return name


def _newest_source() -> float:
    newest = 0.0
    for finder in finders.get_finders():
        for path, storage in finder.list([]):
            newest = max(newest, Path(storage.path(path)).stat().st_mtime)
    return newest


def is_current() -> bool:
    """Whether STATIC_ROOT holds a manifest newer than every file the finders would collect."""
    manifest = Path(settings.STATIC_ROOT) / MANIFEST
    return manifest.exists() and manifest.stat().st_mtime >= _newest_source()


def ensure_collected(**options) -> bool:
    """Run collectstatic unless what is collected is current; True when it ran.

    A lock keeps two processes of one checkout (two test runs, a start during a test run) from
    writing the same files at once.
    """
    root = Path(settings.STATIC_ROOT)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".collect.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_current():
            return False
        call_command("collectstatic", interactive=False, verbosity=0, **options)
        # The manifest is written before the gzip copies: date it after them.
        (root / MANIFEST).touch()
        return True


def favicon(request: HttpRequest) -> HttpResponse:
    """/favicon.ico, which browsers and tools ask for whatever the page's <link rel=icon> says."""
    return redirect(static("dashboard/favicon.ico"))

"""WhiteNoise's scan of the static files, made once per test process.

Every test client builds the middleware stack again, and WhiteNoise's middleware walks
STATIC_ROOT and every finder's files each time it is built (Plotly, the admin's and the API
browser's assets: some 50 ms). The files do not change once collected at the start of the run
(dashboard.http.staticfiles.ensure_collected), so the first scan of each configuration is kept
and handed to later instances; the settings it depends on are its key, so a test that changes
them gets a scan of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings as django_settings
from whitenoise.middleware import WhiteNoiseMiddleware

# The methods the middleware's __init__ scans with.
_SCANS = ("add_files", "add_files_from_finders")
# The set-up as WhiteNoise ships it.
SHIPPED_INIT = WhiteNoiseMiddleware.__init__


def _key(settings) -> tuple:
    return (
        str(settings.STATIC_ROOT),
        settings.STATIC_URL,
        settings.FORCE_SCRIPT_NAME,
        settings.DEBUG,
        *(
            repr(getattr(settings, name, None))
            for name in (
                "WHITENOISE_AUTOREFRESH",
                "WHITENOISE_USE_FINDERS",
                "WHITENOISE_MAX_AGE",
                "WHITENOISE_ROOT",
                "WHITENOISE_STATIC_PREFIX",
                "WHITENOISE_INDEX_FILE",
                "WHITENOISE_IMMUTABLE_FILE_TEST",
                "STATICFILES_DIRS",
                "STATICFILES_FINDERS",
            )
        ),
    )


@contextmanager
def static_files_scanned_once() -> Iterator[None]:
    original = WhiteNoiseMiddleware.__init__
    scanned: dict[tuple, dict] = {}

    def init(self, get_response=None, settings=django_settings):
        key = _key(settings)
        files = scanned.get(key)
        if files is None:
            original(self, get_response, settings)
            scanned[key] = dict(self.files)
            return
        # The instance's own no-op scans shadow the class's methods for the set-up alone.
        for name in _SCANS:
            setattr(self, name, lambda *args, **kwargs: None)
        try:
            original(self, get_response, settings)
        finally:
            for name in _SCANS:
                self.__dict__.pop(name, None)
        self.files = dict(files)

    WhiteNoiseMiddleware.__init__ = init
    try:
        yield
    finally:
        WhiteNoiseMiddleware.__init__ = original

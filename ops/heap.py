"""Keep the garbage collector off the objects a process holds for its whole life.

CPython's full collection walks every object the collector tracks. A web process holds over a
hundred thousand from startup alone (Django, DRF, the models, the URL conf's views, plotly's
figure classes), so a full collection of them is long. The collector runs one whenever enough
new objects have survived two younger collections, which ingest and the heavier pages reach
every few thousand records or every few requests. Each stalls whatever the process is serving,
and those stalls are the slow tail of a page's latency (bench/pages.py measures it).

gc.freeze() moves every object that exists into a permanent generation that no collection
walks; a full collection then walks only what was made since. A process freezes once it has
imported what it serves with, after a collection so that startup garbage is freed rather than
kept. What is frozen is never collected: an object of startup that becomes garbage later is
not freed, which for modules, classes and settings does not happen.
"""

from __future__ import annotations

import gc


def freeze_startup_objects(*, import_views: bool = False) -> int:
    """Collect, then freeze every object of the process; the number frozen.

    `import_views`: import the URL conf's view modules first (a web process: Django imports
    them at the first request otherwise, after the freeze)."""
    if import_views:
        from django.urls import get_resolver

        get_resolver().url_patterns  # noqa: B018 (importing every view module is the point)
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()

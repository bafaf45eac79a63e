"""Keep the garbage collector off the objects a process holds for its whole life.

CPython's full collection walks every object the collector tracks. A web process holds some
120,000 from startup alone (Django, DRF, the models, the URL conf's views, plotly's figure
classes), and on this VM a full collection of them took 65-86 ms, about 0.6 µs an object. The
collector runs one whenever enough new objects have survived two younger collections: every
~10,000 ingested records in a web process, every ~10 requests of the run comparison page. Each
stalls whatever the process is serving: bench/pages.py's run comparison had a p50 of 55 ms and
a p95 of 155-225 ms, its slow requests the ones a full collection fell into (docs/benchmarks.md,
Pages, twelfth session).

gc.freeze() moves every object that exists into a permanent generation that no collection
walks; a full collection then walks only what was made since (7 ms instead of 65-86 in the
same measurement). A process freezes once it has imported what it serves with, after a
collection so that startup garbage is freed rather than kept. What is frozen is never
collected: an object of startup that becomes garbage later is not freed, which for modules,
classes and settings does not happen.
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

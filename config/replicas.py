"""Read replicas: which database a read goes to.

DATABASE_REPLICA_URL names one or more streaming replicas (hot standbys) of the primary,
DATABASE_URL. Reads go to a replica only inside `reading_replica()`, which the web middleware
opens for a request that only reads (a GET, or a form's preview) and the export worker opens
for the rows it writes out; everything else, every write, and the reads of the ingest, the
catch-up, the alert engine and the logins (sessions, users, API keys: an agent must be able to
use a key the moment it is made), stays on the primary.

A replica is used only while it answers and is no further behind than
DECISIONBOARD_REPLICA_MAX_LAG_SECONDS (its health is read at most once a second per process;
one that did not answer is left alone for DOWN_RETRY seconds). Otherwise the read goes to the
primary, without an error.

Read your own writes: a response to a request that wrote carries a cookie with the primary's
WAL position after it (PIN_COOKIE); while the cookie lives, that browser's reads go only to a
replica that has replayed at least that far, so the alert rule or key one just made is on the
next page even from a replica that is seconds behind.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.http import HttpRequest, HttpResponse

from config.outage import DATABASE_UNAVAILABLE
from records.metrics.freshness import replica_position

log = logging.getLogger(__name__)

# Apps and models whose reads always go to the primary: logins and sessions (a session made by
# a login must be found by the next request whatever the replica's delay), API keys (an agent
# has no cookie to pin it), the workers' own bookkeeping, and Django's migrations and content
# types.
PRIMARY_ONLY_APPS = {"auth", "sessions", "contenttypes", "admin", "workers"}
PRIMARY_ONLY_MODELS = {("records", "apikey")}

PIN_COOKIE = "decisionboard_wal"
HEALTH_TTL = 1.0  # seconds a replica's health is trusted in one process
DOWN_RETRY = 5.0  # seconds a replica that did not answer is left alone

_reading: ContextVar[str | None] = ContextVar("decisionboard_read_alias", default=None)


def replica_aliases() -> list[str]:
    return [alias for alias in settings.DATABASES if alias.startswith("replica")]


@dataclass
class Health:
    ok: bool
    delay: float = 0.0  # seconds of the primary's commits not replayed yet
    replayed: int = 0  # the WAL position replayed, as a number
    checked: float = 0.0


_health: dict[str, Health] = {}


def health(alias: str, *, fresh: bool = False) -> Health:
    """The replica's health, read at most every HEALTH_TTL seconds (or now, `fresh`)."""
    now = time.monotonic()
    known = _health.get(alias)
    if known and not fresh:
        ttl = HEALTH_TTL if known.ok else DOWN_RETRY
        if now - known.checked < ttl:
            return known
    try:
        replayed, delay = replica_position(connections[alias])
        known = Health(True, delay, replayed, now)
    except DATABASE_UNAVAILABLE as exc:
        log.warning("replica %s is unavailable; reading the primary: %s", alias, exc)
        connections[alias].close()
        known = Health(False, checked=now)
    _health[alias] = known
    return known


def choose_replica(pinned: int = 0) -> str:
    """A replica that answers, is within the lag setting and has replayed up to `pinned` (a WAL
    position), or the primary's alias when none is."""
    limit = settings.DECISIONBOARD["REPLICA_MAX_LAG_SECONDS"]
    aliases = replica_aliases()
    random.shuffle(aliases)
    for alias in aliases:
        state = health(alias)
        if state.ok and state.replayed < pinned:
            state = health(alias, fresh=True)
        if state.ok and state.delay <= limit and state.replayed >= pinned:
            return alias
    return DEFAULT_DB_ALIAS


@contextmanager
def reading_replica(pinned: int = 0, *, alias: str | None = None) -> Iterator[str]:
    """Reads in the block go to a replica (choose_replica, or `alias`), when one is configured
    and fit; yields the alias chosen."""
    if alias is None:
        alias = choose_replica(pinned) if replica_aliases() else DEFAULT_DB_ALIAS
    token = _reading.set(alias)
    try:
        yield alias
    finally:
        _reading.reset(token)


@contextmanager
def reading_primary() -> Iterator[None]:
    """Every read in the block goes to the primary, even inside reading_replica()."""
    with reading_replica(alias=DEFAULT_DB_ALIAS):
        yield


class ReadReplicaRouter:
    """Reads inside reading_replica() to its replica, except PRIMARY_ONLY_*; every write, and
    every migration, to the primary."""

    def db_for_read(self, model, **hints) -> str | None:
        alias = _reading.get()
        if alias is None or alias == DEFAULT_DB_ALIAS:
            return None
        meta = model._meta
        if meta.app_label in PRIMARY_ONLY_APPS or (meta.app_label, meta.model_name) in (
            PRIMARY_ONLY_MODELS
        ):
            return DEFAULT_DB_ALIAS
        return alias

    def db_for_write(self, model, **hints) -> str:
        return DEFAULT_DB_ALIAS

    def allow_relation(self, obj1, obj2, **hints) -> bool:
        return True  # the replicas hold the primary's rows

    def allow_migrate(self, db, app_label, model_name=None, **hints) -> bool:
        return db == DEFAULT_DB_ALIAS


def parse_position(text: str) -> int:
    """A WAL position ('16/B374D848') as a number; 0 for anything else."""
    high, _, low = text.partition("/")
    try:
        return (int(high, 16) << 32) + int(low, 16)
    except ValueError:
        return 0


_SAFE = {"GET", "HEAD", "OPTIONS"}
# Writes nobody reads back at once (records are folded later, by the catch-up): no pin, and no
# extra query on the ingest path.
_UNPINNED = {"api-records", "api-otlp-traces", "otlp-traces"}


class ReplicaReadMiddleware:
    """Sends the reads of a request that only reads to a replica, and pins a browser that just
    wrote to the primary's position (PIN_COOKIE). After the session and authentication
    middleware, whose reads stay on the primary anyway.

    A request that only reads: GET, HEAD and OPTIONS, and a form posted to preview (a `preview`
    field: the alert rule form's preview saves nothing)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.enabled = bool(replica_aliases())

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not self.enabled:
            return self.get_response(request)
        if request.method in _SAFE or _is_preview(request):
            pinned = parse_position(request.COOKIES.get(PIN_COOKIE, ""))
            with reading_replica(pinned) as alias:
                response = self.get_response(request)
            if (
                alias != DEFAULT_DB_ALIAS
                and response.status_code == 503
                and not health(alias, fresh=True).ok
            ):
                # The replica went away since its health was read (config.outage answered
                # 503): a request that only reads is answered again from the primary.
                with reading_primary():
                    response = self.get_response(request)
            return response
        response = self.get_response(request)
        match = request.resolver_match
        if response.status_code < 400 and not (match and match.url_name in _UNPINNED):
            self._pin(response)
        return response

    def _pin(self, response: HttpResponse) -> None:
        try:
            with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
                cursor.execute("SELECT CAST(pg_current_wal_lsn() AS text)")
                position = cursor.fetchone()[0]
        except DATABASE_UNAVAILABLE:
            return
        # Past the lag setting a replica is not read at all, so the pin need not outlive it.
        max_age = int(settings.DECISIONBOARD["REPLICA_MAX_LAG_SECONDS"]) + 5
        response.set_cookie(
            PIN_COOKIE, position, max_age=max_age, httponly=True, samesite="Lax",
            secure=settings.SESSION_COOKIE_SECURE,
        )  # fmt: skip


def _is_preview(request: HttpRequest) -> bool:
    return (
        request.method == "POST"
        and request.content_type == "application/x-www-form-urlencoded"
        and "preview" in request.POST
    )

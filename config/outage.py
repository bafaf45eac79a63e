"""503 with Retry-After when the database cannot be reached, in one place.

PostgreSQL stopped, restarting or unreachable, or SQLite busy past its timeout, surfaces as an
OperationalError or InterfaceError wherever the first query of a request runs: in a DRF view
(which re-raises what it does not handle), in a page, in a middleware. The middleware answers
those raised by views; `server_error` (handler500) answers those raised anywhere else, and
falls back to Django's 500 page for everything that is not an outage. The DRF exception
handler, if one is installed, can call `outage_response` for the same answer.

Nothing of an ingest batch is stored when its transaction does not commit (records.store.writer), so
a client that gets this 503 resends the batch; record ids make the resend safe. Once the
database is back, the next request's health check (CONN_HEALTH_CHECKS) replaces a connection
broken by the outage, so the service recovers on its own.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

import psycopg
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.views import defaults

log = logging.getLogger(__name__)

# Django wraps the driver's errors in its own; COPY runs on psycopg's cursor directly
# (records.store.writer), so psycopg's own can arrive unwrapped.
DATABASE_UNAVAILABLE: tuple[type[Exception], ...] = (
    OperationalError,
    InterfaceError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)
RETRY_AFTER_SECONDS = 5
# Paths answered in JSON: the API and OTLP ingest. Everything else is a page.
_JSON_PREFIXES = ("/api/", "/v1/")
_DETAIL = (
    "The database cannot be reached; nothing of this request was stored. "
    f"Retry in {RETRY_AFTER_SECONDS} s."
)


def is_database_outage(exc: BaseException | None) -> bool:
    return isinstance(exc, DATABASE_UNAVAILABLE)


def outage_response(request: HttpRequest) -> HttpResponse:
    """The 503 for `request`: JSON for the API, a plain page (no query behind it) otherwise."""
    if request.path.startswith(_JSON_PREFIXES):
        response: HttpResponse = JsonResponse(
            {"detail": _DETAIL, "code": "database_unavailable"}, status=503
        )
    else:
        # Rendered without the request: the context processors would look up the user.
        response = HttpResponse(
            render_to_string("503.html", {"retry_after": RETRY_AFTER_SECONDS}), status=503
        )
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    response["Cache-Control"] = "no-store"
    return response


class DatabaseOutageMiddleware:
    """Answers a view's database outage with a 503; other exceptions pass on untouched."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if not is_database_outage(exc):
            return None
        log.warning("database unavailable, answering 503 to %s %s: %s", request.method,
                    request.path, exc)  # fmt: skip
        response = outage_response(request)
        response._has_been_logged = True  # this line says why; django.request need not repeat it
        return response


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: an outage raised outside a view (a middleware's query) is a 503 too."""
    if is_database_outage(sys.exc_info()[1]):
        return outage_response(request)
    return defaults.server_error(request)

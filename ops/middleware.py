"""Request latency for /metrics, by method, URL route and status."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from ops.instruments import observe_request


def route_of(request: HttpRequest) -> str:
    """The URL pattern that served the request (never the path: a run id in a path would make
    a time series per run); `unmatched` for a path no pattern knows."""
    match = getattr(request, "resolver_match", None)
    return "unmatched" if match is None else "/" + match.route


class RequestMetricsMiddleware:
    """First in MIDDLEWARE, so that it times the whole answer, other middleware included."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        observe_request(
            request.method or "", route_of(request), response.status_code,
            time.perf_counter() - started,
        )  # fmt: skip
        return response

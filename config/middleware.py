"""Refuse a URL no view can answer, once, before any view runs (no 5xx).

A NUL character (`%00`) in the path or the query string reaches no stored value (ingest never
stores one in the envelope, and PostgreSQL refuses them in text), yet any query that carries
one into PostgreSQL fails. Every path segment and parameter of every page and endpoint passes
here, so none of them has to remember.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse

NUL_MESSAGE = "A NUL character (%00) is not allowed in a URL."


def _holds_nul(request: HttpRequest) -> bool:
    if "\x00" in request.path:
        return True
    return any(
        "\x00" in name or any("\x00" in value for value in values)
        for name, values in request.GET.lists()
    )


class RejectHostileURLMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if _holds_nul(request):
            if request.path.startswith("/api/"):
                return JsonResponse({"detail": NUL_MESSAGE}, status=400)
            return HttpResponseBadRequest(NUL_MESSAGE, content_type="text/plain; charset=utf-8")
        return self.get_response(request)

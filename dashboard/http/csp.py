"""Content-Security-Policy for every response: scripts from this site only, never inline.

Record text (turn text, messages, tool names) is untrusted: the templates escape it, and this
header is the second wall: if markup ever slipped through, the browser would still refuse to run
an inline `<script>`, an `onerror=` attribute or a `javascript:` URL. Page scripts live in static
files and read their data from `json_script` elements.

style-src allows 'unsafe-inline' because plotly.js writes `<style>` elements and style
attributes as it draws (and the alerts pages carry inline styles); a style cannot run code.

The API docs page (drf-spectacular's Swagger UI template) starts Swagger UI from an inline
script, so /api/docs/ alone gets script-src 'unsafe-inline'; it shows the schema, no record text.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

HEADER = "Content-Security-Policy"

POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        # Plotly's "download as PNG" and its modebar build data: images.
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
DOCS_POLICY = POLICY.replace("script-src 'self'", "script-src 'self' 'unsafe-inline'")
DOCS_PREFIX = "/api/docs/"


def policy_for(path: str) -> str:
    return DOCS_POLICY if path.startswith(DOCS_PREFIX) else POLICY


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        # A view that set its own policy knows better; every other response gets ours.
        if HEADER not in response:
            response[HEADER] = policy_for(request.path)
        return response

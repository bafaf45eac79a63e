from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path
from django.views import defaults

urlpatterns = [
    path("api/v1/", include("api.urls")),
    # OTLP/HTTP and the OpenAPI pages; /metrics and the probes. The apps are named by their
    # URL modules only, so that the wiring imports none of them.
    path("", include("api.site_urls")),
    path("", include("ops.probe_urls")),
    path("admin/", admin.site.urls),
    # The login page and single sign-on (sso.urls) before Django's own, whose login it replaces.
    path("accounts/", include("sso.urls")),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("dashboard.urls")),
]

# A database outage raised outside a view is a 503 too (config.outage); the rest, Django's 500.
handler500 = "config.outage.server_error"


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """A path no pattern matches: JSON under /api/ (as the API's own 404s), the page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=404)
    return defaults.page_not_found(request, exception)


handler404 = not_found

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path, re_path
from django.views import defaults

from api.openapi import SWAGGER_ASSETS, DocsView, docs_asset
from api.otlp import OtlpTracesView
from ops import views as ops_views

urlpatterns = [
    path("api/v1/", include("api.urls")),
    # OTLP/HTTP at the path an exporter appends to OTEL_EXPORTER_OTLP_ENDPOINT.
    path("v1/traces", OtlpTracesView.as_view(), name="otlp-traces"),
    path("api/docs/", DocsView.as_view(), name="api-docs"),
    re_path(
        rf"^api/docs/assets/(?P<name>{'|'.join(a.replace('.', '[.]') for a in SWAGGER_ASSETS)})$",
        docs_asset,
        name="api-docs-asset",
    ),
    # Prometheus (behind DECISIONBOARD_METRICS_TOKEN) and the probes.
    path("metrics", ops_views.metrics, name="ops-metrics"),
    path("healthz", ops_views.healthz, name="ops-healthz"),
    path("readyz", ops_views.readyz, name="ops-readyz"),
    path("admin/", admin.site.urls),
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

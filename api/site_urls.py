"""The API's paths outside /api/v1/: OTLP/HTTP and the OpenAPI pages."""

from __future__ import annotations

from django.urls import path, re_path

from api.openapi import SWAGGER_ASSETS, DocsView, docs_asset
from api.otlp import OtlpTracesView

urlpatterns = [
    # OTLP/HTTP at the path an exporter appends to OTEL_EXPORTER_OTLP_ENDPOINT.
    path("v1/traces", OtlpTracesView.as_view(), name="otlp-traces"),
    path("api/docs/", DocsView.as_view(), name="api-docs"),
    re_path(
        rf"^api/docs/assets/(?P<name>{'|'.join(a.replace('.', '[.]') for a in SWAGGER_ASSETS)})$",
        docs_asset,
        name="api-docs-asset",
    ),
]

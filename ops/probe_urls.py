"""Prometheus (behind DECISIONBOARD_METRICS_TOKEN) and the probes, at the root of the site."""

from __future__ import annotations

from django.urls import path

from ops import views

urlpatterns = [
    path("metrics", views.metrics, name="ops-metrics"),
    path("healthz", views.healthz, name="ops-healthz"),
    path("readyz", views.readyz, name="ops-readyz"),
]

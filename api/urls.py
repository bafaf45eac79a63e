from __future__ import annotations

from django.urls import path

from api.ingest import IngestView
from api.metrics import MetricView, StreakView

urlpatterns = [
    path("records", IngestView.as_view(), name="api-records"),
    path("metrics/<str:metric>", MetricView.as_view(), name="api-metric"),
    path("streaks", StreakView.as_view(), name="api-streaks"),
]

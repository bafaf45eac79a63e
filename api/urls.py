from __future__ import annotations

from django.urls import path

from api.ingest import IngestView

urlpatterns = [
    path("records", IngestView.as_view(), name="api-records"),
]

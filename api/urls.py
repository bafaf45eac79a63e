from __future__ import annotations

from django.urls import path
from rest_framework.routers import SimpleRouter

from api.alerts import AlertChannelViewSet, AlertEventListView, AlertRuleViewSet
from api.audit_endpoints import AuditExportView, AuditListView
from api.changes import ChangesView
from api.export_endpoints import ExportDownloadView, ExportJobListView, ExportJobView, ExportView
from api.metrics import MetricView, StreakView
from api.openapi import DecisionboardSchemaView
from api.otlp import OtlpTracesView
from api.price_overrides import PriceOverrideViewSet
from api.read import RecordsView, RunDetailView, RunListView
from api.release_markers import ReleaseMarkersView

urlpatterns = [
    # POST ingests (api.ingest.IngestView), GET lists: RecordsView serves both.
    path("records", RecordsView.as_view(), name="api-records"),
    path("runs", RunListView.as_view(), name="api-runs"),
    # run_ids are free text: `path` lets one hold a slash.
    path("runs/<path:run_id>", RunDetailView.as_view(), name="api-run"),
    path("export", ExportView.as_view(), name="api-export"),
    path("exports", ExportJobListView.as_view(), name="api-exports"),
    path("exports/<int:job_id>", ExportJobView.as_view(), name="api-export-job"),
    path("exports/<int:job_id>/download", ExportDownloadView.as_view(), name="api-export-download"),
    path("schema/", DecisionboardSchemaView.as_view(), name="api-schema"),
    path("metrics/<str:metric>", MetricView.as_view(), name="api-metric"),
    path("streaks", StreakView.as_view(), name="api-streaks"),
    path("changes", ChangesView.as_view(), name="api-changes"),
    # POST marks a release (an ingest key's, as records are posted), GET lists the markers.
    path("releases", ReleaseMarkersView.as_view(), name="api-releases"),
    path("audit", AuditListView.as_view(), name="api-audit"),
    path("audit/export", AuditExportView.as_view(), name="api-audit-export"),
    # OTLP/HTTP under the API's prefix; /v1/traces (config.urls) is the path exporters default to.
    path("otlp/v1/traces", OtlpTracesView.as_view(), name="api-otlp-traces"),
]

# /alert-rules[/{id}], /alert-channels[/{id}[/enable]] and /price-overrides[/{id}], no trailing
# slash like the others.
alert_rules = SimpleRouter(trailing_slash=False)
alert_rules.register("alert-rules", AlertRuleViewSet, basename="api-alert-rules")
alert_rules.register("alert-channels", AlertChannelViewSet, basename="api-alert-channels")
alert_rules.register("price-overrides", PriceOverrideViewSet, basename="api-price-overrides")
urlpatterns += [
    *alert_rules.urls,
    path("alert-events", AlertEventListView.as_view(), name="api-alert-events"),
]

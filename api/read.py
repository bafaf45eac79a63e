"""GET /api/v1/runs, /api/v1/runs/{run_id} and /api/v1/records (docs/api.md, "Read API").

POST /api/v1/records (ingest, api.ingest) shares its path with the records list: RecordsView
serves both.

Lists take the filter vocabulary of records.contract.filters and keyset pagination (api.pagination):
records oldest first by (ts, id), runs newest first by id (when the run was first seen), orders
that arriving records never change. A malformed parameter is a 400 naming it.
"""

from __future__ import annotations

from datetime import datetime

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from api.access import project_for_request
from api.ingest import IngestView
from api.metrics import ReadView
from api.openapi import INGEST_DESCRIPTION, INGEST_REQUEST, INGEST_RESPONSES
from api.pagination import LIMIT_PARAMETER, Keyset, page_response
from api.serializers import RecordSerializer, RunDetailSerializer, RunSerializer
from records.contract.filters import (
    HAS_FLAGS,
    Filters,
    filter_records,
    filter_runs,
    parse_filters,
)
from records.contract.kinds import KIND_NAMES
from records.models import Record, Run
from records.store import retention

RECORD_KEYSET = Keyset((("ts", datetime), ("id", int)))
RUN_KEYSET = Keyset((("id", int),), descending=True)
MAX_SUB_RUNS = 1000


def request_filters(request: Request) -> Filters:
    """The filters of the query string; a bad one raises FilterError, a 400 (api.errors)."""
    return parse_filters(request.query_params)


# --- OpenAPI parameters, shared with api.export_endpoints
# -----------------------------------------------
_TIME = "RFC 3339 timestamp with an offset, e.g. 2026-11-20T09:00:00Z"
VOCABULARY_PARAMETERS = [
    OpenApiParameter("from", OpenApiTypes.DATETIME, description=f"Inclusive start ({_TIME})."),
    OpenApiParameter("to", OpenApiTypes.DATETIME, description=f"Exclusive end ({_TIME})."),
    OpenApiParameter("agent", str, description="Comma list of agents (any of)."),
    OpenApiParameter(
        "release",
        str,
        description="Comma list of releases (any of): records posted with one of them; runs "
        "with a record posted with one of them.",
    ),
    OpenApiParameter("model", str, description="Comma list of models (any of)."),
    OpenApiParameter(
        "kind", str, description=f"Comma list of record kinds (any of): {', '.join(KIND_NAMES)}."
    ),
    OpenApiParameter("run_id", str, description="Comma list of run ids (any of)."),
    OpenApiParameter("session_id", str, description="Comma list of session ids (any of)."),
    OpenApiParameter(
        "has",
        str,
        description=f"Comma list of flags (any of): {', '.join(HAS_FLAGS)}.",
    ),
]
PROJECT_PARAMETER = OpenApiParameter(
    "project",
    str,
    description="The project, for an operator session that belongs to several "
    "(a key reads its own project).",
)
FILTER_PARAMETERS = [*VOCABULARY_PARAMETERS, PROJECT_PARAMETER]
PAGE_PARAMETERS = [
    OpenApiParameter("cursor", str, description="The `next` link's cursor; absent for page 1."),
    LIMIT_PARAMETER,
]


def page_schema(name: str, item) -> serializers.Serializer:
    return inline_serializer(
        name,
        {
            "results": item(many=True),
            "next": serializers.URLField(allow_null=True, help_text="The next page, or null."),
        },
    )


class RunListView(ReadView):
    @extend_schema(
        operation_id="runs_list",
        summary="List runs, newest first",
        description="Runs overlapping the time range (first_ts < to and last_ts >= from), "
        "newest first by when the run was first seen. A run's time span, counters and summary "
        "(`model`, `kind`, `has`) are kept by the workers, a few seconds behind ingest.",
        parameters=FILTER_PARAMETERS + PAGE_PARAMETERS,
        responses={200: page_schema("RunPage", RunSerializer)},
    )
    def get(self, request):
        project = project_for_request(request)
        filters = request_filters(request)
        queryset = filter_runs(Run.objects.filter(project=project), filters)
        return page_response(request, queryset, RUN_KEYSET, RunSerializer)


class RunDetailView(ReadView):
    @extend_schema(
        operation_id="runs_retrieve",
        summary="One run, its counters and its sub-runs",
        parameters=[PROJECT_PARAMETER],
        responses={200: RunDetailSerializer},
    )
    def get(self, request, run_id: str):
        project = project_for_request(request)
        run = Run.objects.filter(project=project, run_id=run_id).first()
        if run is None:
            raise NotFound("No such run.")
        sub_runs = Run.objects.filter(project=project, parent_run_id=run_id).order_by(
            "first_ts", "id"
        )[:MAX_SUB_RUNS]
        return Response(RunDetailSerializer(run, context={"sub_runs": list(sub_runs)}).data)


class RecordsView(IngestView):
    """/api/v1/records: POST ingests (api.ingest), GET lists; each with its own auth.

    One path, two audiences: agents post with ingest keys, scripts and operators read with
    read keys or a session. The read side swaps in ReadView's authentication and permission.
    """

    def _reading(self) -> bool:
        # drf-spectacular builds its mock request before the view has one.
        request = getattr(self, "request", None)
        return request is not None and request.method in ("GET", "HEAD", "OPTIONS")

    def get_authenticators(self):
        if self._reading():
            return [auth() for auth in ReadView.authentication_classes]
        return super().get_authenticators()

    def get_permissions(self):
        if self._reading():
            return [permission() for permission in ReadView.permission_classes]
        return super().get_permissions()

    def get_throttles(self):
        return super().get_throttles() if not self._reading() else []

    @extend_schema(
        operation_id="records_create",
        summary="Post decision records",
        description=INGEST_DESCRIPTION,
        request=INGEST_REQUEST,
        responses=INGEST_RESPONSES,
        parameters=[
            OpenApiParameter(
                "Retry-After",
                int,
                OpenApiParameter.HEADER,
                response=[429],
                description="Seconds until the key may post again.",
            )
        ],
    )
    def post(self, request):
        return super().post(request)

    @extend_schema(
        operation_id="records_list",
        summary="List records, oldest first",
        description="Records as posted (the envelope and `data`) plus `derived`, in (ts, id) "
        "order. `model` is the model the record's metrics group by (classifier.model of a pick, "
        "default_model of a selection, model otherwise); `has` reads the record's own flags.",
        parameters=FILTER_PARAMETERS + PAGE_PARAMETERS,
        responses={200: page_schema("RecordPage", RecordSerializer)},
    )
    def get(self, request):
        project = project_for_request(request)
        filters = request_filters(request)
        queryset = filter_records(Record.objects.filter(project=project), filters)
        response = page_response(request, queryset, RECORD_KEYSET, RecordSerializer)
        for name, value in retention.retention_headers(project, filters.start).items():
            response[name] = value
        return response

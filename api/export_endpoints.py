"""Exports over the API.

GET /api/v1/export streams a filtered export as it is read from a server-side cursor, so the web
process holds one batch of rows at a time however many rows there are. POST /api/v1/exports
starts a worker job instead (workers.export_jobs), whose progress GET /api/v1/exports/{id} shows and
whose file GET /api/v1/exports/{id}/download serves to readers of the same project.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.db import connections, transaction
from django.db.models import QuerySet
from django.http import FileResponse, StreamingHttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import APIException, NotFound, ParseError, ValidationError
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.response import Response

from api.access import project_for_request
from api.metrics import ReadView
from api.pagination import Keyset, page_response
from api.read import (
    FILTER_PARAMETERS,
    PAGE_PARAMETERS,
    PROJECT_PARAMETER,
    VOCABULARY_PARAMETERS,
    page_schema,
    request_filters,
)
from api.serializers import ExportJobSerializer
from records.contract.filters import PARAMS, FilterError, filter_records
from records.formats.record_export import FORMATS, export_chunks, export_rows, parse_format
from records.models import ApiKey, Project, Record
from records.store import retention
from records.store.backends import backend
from workers.export_jobs import file_path
from workers.export_requests import start_export
from workers.models import ExportJob

JOB_KEYSET = Keyset((("id", int),), descending=True)
FORMAT_PARAMETER = OpenApiParameter(
    "format", str, enum=list(FORMATS), required=True, description="The file format."
)


class IgnoreFormatNegotiation(DefaultContentNegotiation):
    """JSON for every answer that is not the file: `?format=` names the export's format here,
    not a DRF renderer (DRF would answer 404 for a format it has no renderer for)."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class ExportView(ReadView):
    content_negotiation_class = IgnoreFormatNegotiation

    @extend_schema(
        operation_id="export_stream",
        summary="Stream a filtered export",
        description="Records matching the filters, oldest first, as CSV (one column per "
        "envelope and facet field, `data` and `derived` as JSON; a cell that starts like a "
        "spreadsheet formula gets a leading single quote), JSONL (one record a line, as GET "
        "/api/v1/records shows it) or Parquet (typed columns). Streamed as it is read; for a "
        "file to fetch later, start a job (POST /api/v1/exports).",
        parameters=[FORMAT_PARAMETER, *FILTER_PARAMETERS],
        responses={
            (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, "The export, streamed."),
            (200, "application/x-ndjson"): OpenApiResponse(OpenApiTypes.STR),
            (200, "application/vnd.apache.parquet"): OpenApiResponse(OpenApiTypes.BINARY),
        },
    )
    def get(self, request):
        project = project_for_request(request)
        # Every parameter is read here, before the 200's headers go out with the first chunk.
        fmt = parse_format(request.query_params.get("format"))
        filters = request_filters(request)
        queryset = filter_records(Record.objects.filter(project=project), filters)
        # The database is chosen now (a replica, config.replicas): the body is streamed after
        # the request's middleware has returned.
        queryset = queryset.using(queryset.db)
        response = streamed_file(_stream(fmt, queryset), project, "records", fmt)
        for name, value in retention.retention_headers(project, filters.start).items():
            response[name] = value
        return response


def streamed_file(
    chunks: Iterator[bytes], project: Project, what: str, fmt: str
) -> StreamingHttpResponse:
    """An export streamed as it is read: the format's content type, and an attachment named
    `<project>-<what>-<UTC stamp>.<extension>` (the records' export, the audit log's)."""
    response = StreamingHttpResponse(chunks, content_type=FORMATS[fmt].content_type)
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    response["Content-Disposition"] = (
        f'attachment; filename="{project.name}-{what}-{stamp}.{FORMATS[fmt].extension}"'
    )
    return response


def _stream(fmt: str, queryset: QuerySet) -> Iterator[bytes]:
    if not backend(connections[queryset.db]).features.holds_cursors_outside_transactions:
        # SQLite reads lazily anyway; a transaction here would take its write lock.
        yield from export_chunks(fmt, export_rows(queryset))
        return
    # Inside a transaction the named cursor is not WITH HOLD, which PostgreSQL would fill with
    # every row before the first fetch.
    with transaction.atomic(using=queryset.db):
        yield from export_chunks(fmt, export_rows(queryset))


class ServiceUnavailable(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The workers cannot be reached; stream the export with GET /api/v1/export."


def _job_for_request(request, job_id: int) -> ExportJob:
    """The job if the caller reads its project; another project's job is a 404."""
    jobs = ExportJob.objects.select_related("project")
    if isinstance(request.auth, ApiKey):
        jobs = jobs.filter(project_id=request.auth.project_id)
    else:
        jobs = jobs.filter(project__in=Project.objects.for_user(request.user))
    job = jobs.filter(pk=job_id).first()
    if job is None:
        raise NotFound("No such export.")
    return job


# A browser's form post to the API carries its CSRF token among the fields.
_FORM_TOKEN = "csrfmiddlewaretoken"


def _body_params(data) -> dict[str, str]:
    """The export's parameters from a JSON or form body; a list (or a repeated form field) is
    a comma list. A field that is not one of them is a 400 naming it: a typo (`{"filters":
    {...}}`) must not quietly export the whole project."""
    if not hasattr(data, "get"):
        raise ParseError("The body must be an object: format and the filter parameters.")
    known = ("format", *PARAMS)
    unknown = [name for name in data if name not in known and name != _FORM_TOKEN]
    if unknown:
        raise ValidationError(
            {
                name: [f"is not a parameter of an export; the parameters are {', '.join(known)}"]
                for name in unknown
            }
        )
    params = {}
    for name in known:
        if name not in data:
            continue
        value = data.getlist(name) if hasattr(data, "getlist") else data[name]  # a form
        if isinstance(value, list):
            if not all(isinstance(v, str) for v in value):
                raise FilterError(name, "must be a string or a list of strings")
            value = ",".join(value)
        if not isinstance(value, str):
            raise FilterError(name, "must be a string or a list of strings")
        if value:
            params[name] = value
    return params


class ExportJobListView(ReadView):
    content_negotiation_class = IgnoreFormatNegotiation

    @extend_schema(
        operation_id="exports_list",
        summary="List export jobs, newest first",
        parameters=[PROJECT_PARAMETER, *PAGE_PARAMETERS],
        responses={200: page_schema("ExportJobPage", ExportJobSerializer)},
    )
    def get(self, request):
        project = project_for_request(request)
        jobs = ExportJob.objects.filter(project=project).select_related("project")
        return page_response(
            request, jobs, JOB_KEYSET, ExportJobSerializer, context={"request": request}
        )

    @extend_schema(
        operation_id="exports_create",
        summary="Start an export job",
        description="For exports too large to stream comfortably: a worker writes the file and "
        "the job shows its progress; `download_url` is set once it is done. The body takes "
        "`format` and the filter parameters of GET /api/v1/records (strings; a JSON list is "
        "read as a comma list).",
        parameters=[PROJECT_PARAMETER],
        request={
            "application/json": {
                "type": "object",
                "properties": {
                    "format": {"type": "string", "enum": list(FORMATS)},
                    **{
                        p.name: {
                            "anyOf": [
                                {"type": "string"},
                                {"type": "array", "items": {"type": "string"}},
                            ]
                        }
                        for p in VOCABULARY_PARAMETERS
                    },
                },
                "required": ["format"],
                # A field it does not know is a 400 naming it.
                "additionalProperties": False,
            }
        },
        responses={201: ExportJobSerializer, 503: OpenApiTypes.OBJECT},
    )
    def post(self, request):
        project = project_for_request(request)
        params = _body_params(request.data)
        with transaction.atomic():
            job = start_export(
                project,
                params.get("format"),
                params,
                user=request.user if not isinstance(request.auth, ApiKey) else None,
                api_key=request.auth if isinstance(request.auth, ApiKey) else None,
            )
        job.refresh_from_db()
        if job.status == ExportJob.Status.FAILED:  # the broker refused it (see enqueue)
            raise ServiceUnavailable()
        data = ExportJobSerializer(job, context={"request": request}).data
        return Response(data, status=status.HTTP_201_CREATED)


class ExportJobView(ReadView):
    @extend_schema(
        operation_id="exports_retrieve",
        summary="One export job and its progress",
        responses={200: ExportJobSerializer},
    )
    def get(self, request, job_id: int):
        job = _job_for_request(request, job_id)
        return Response(ExportJobSerializer(job, context={"request": request}).data)


class ExportDownloadView(ReadView):
    @extend_schema(
        operation_id="exports_download",
        summary="Download a finished export",
        responses={
            (200, "application/octet-stream"): OpenApiResponse(OpenApiTypes.BINARY),
            404: OpenApiResponse(description="No such export, or not finished."),
            410: OpenApiResponse(description="The file has expired."),
        },
    )
    def get(self, request, job_id: int):
        job = _job_for_request(request, job_id)
        if job.status == ExportJob.Status.EXPIRED:
            return Response({"detail": "This export has expired."}, status=status.HTTP_410_GONE)
        if job.status != ExportJob.Status.DONE:
            raise NotFound(f"This export is {job.status}, not done.")
        try:
            handle = open(file_path(job), "rb")  # noqa: SIM115 (FileResponse closes it)
        except FileNotFoundError:
            return Response({"detail": "This export has expired."}, status=status.HTTP_410_GONE)
        fmt = FORMATS[job.format]
        return FileResponse(
            handle,
            as_attachment=True,
            filename=f"{job.project.name}-export-{job.pk}.{fmt.extension}",
            content_type=fmt.content_type,
        )

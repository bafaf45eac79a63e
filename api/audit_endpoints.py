"""GET /api/v1/audit (the project's audit log, newest first, keyset-paged) and
GET /api/v1/audit/export (the same entries as CSV or JSON Lines): docs/api.md, "Audit log".

Only an admin of the project reads them, through a logged-in session (config.roles: the admin
role). An API key is refused whatever its scope: no scope is an admin's, and the keys agents
hold must not read who changed what (docs/access.md).
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.permissions import BasePermission

from api.access import RoleRequired, project_for_request
from api.export_endpoints import IgnoreFormatNegotiation, streamed_file
from api.metrics import ReadView
from api.pagination import Keyset, page_response
from api.read import PAGE_PARAMETERS, PROJECT_PARAMETER, page_schema
from records.formats.audit_export import AUDIT_FORMATS, audit_export_chunks
from records.formats.record_export import parse_format
from records.metrics.audit_reads import (
    OBJECT_TYPES,
    audit_entries,
    export_entries,
    parse_audit_filters,
)
from records.models import ApiKey, AuditEntry

AUDIT_KEYSET = Keyset((("id", int),), descending=True)

AUDIT_PARAMETERS = [
    OpenApiParameter("action", str, description="One action: mint, revoke, add, create, ..."),
    OpenApiParameter("object_type", str, enum=list(OBJECT_TYPES), description="One type."),
    OpenApiParameter(
        "actor", str, description="One person: an operator's user name, or a key as named."
    ),
    PROJECT_PARAMETER,
]


class AdminSession(BasePermission):
    """A logged-in operator's session; an API key is refused (config.roles then asks for the
    admin role in the project)."""

    message = "The audit log is read by a project's admins, logged in; an API key cannot read it."

    def has_permission(self, request, view) -> bool:
        if isinstance(request.auth, ApiKey):
            return False
        return bool(request.user and request.user.is_authenticated)


class AuditEntrySerializer(serializers.ModelSerializer):
    before = serializers.JSONField(allow_null=True, help_text="The changed fields before.")
    after = serializers.JSONField(allow_null=True, help_text="The changed fields after.")

    class Meta:
        model = AuditEntry
        fields = list(AuditEntry.SHOWN)


class AuditView(ReadView):
    permission_classes = [AdminSession, RoleRequired]

    def entries(self, request):
        project = project_for_request(request)
        # FilterError is a 400 naming the parameter (api.errors).
        return project, audit_entries(project, parse_audit_filters(request.query_params))


class AuditListView(AuditView):
    @extend_schema(
        operation_id="audit_list",
        summary="The project's audit log, newest first",
        description="Every change to the project's API keys, members and roles, alert rules "
        "(pauses and silences too), channels, price overrides, retention and redaction: who "
        "(an operator, a key or a command), when, what, the changed fields before and after "
        "(never a secret) and from which address. Only a project's admin reads it, logged in; "
        "an API key is refused (403).",
        parameters=[*AUDIT_PARAMETERS, *PAGE_PARAMETERS],
        responses={200: page_schema("AuditEntryPage", AuditEntrySerializer)},
    )
    def get(self, request):
        _, entries = self.entries(request)
        return page_response(request, entries, AUDIT_KEYSET, AuditEntrySerializer)


class AuditExportView(AuditView):
    content_negotiation_class = IgnoreFormatNegotiation

    @extend_schema(
        operation_id="audit_export",
        summary="Stream the project's audit log as CSV or JSON Lines",
        description="The entries GET /api/v1/audit lists with the same filters, newest first: "
        "CSV (one column a field, `before` and `after` as JSON; a cell that starts like a "
        "spreadsheet formula gets a leading single quote) or JSONL (one entry a line).",
        parameters=[
            OpenApiParameter("format", str, enum=list(AUDIT_FORMATS), required=True),
            *AUDIT_PARAMETERS,
        ],
        responses={
            (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, "The export, streamed."),
            (200, "application/x-ndjson"): OpenApiResponse(OpenApiTypes.STR),
        },
    )
    def get(self, request):
        project, entries = self.entries(request)
        fmt = parse_format(request.query_params.get("format"), AUDIT_FORMATS)
        # The database is chosen now (a replica, config.replicas): the body is streamed after
        # the request's middleware has returned.
        entries = entries.using(entries.db)
        return streamed_file(
            audit_export_chunks(fmt, export_entries(entries)), project, "audit", fmt
        )

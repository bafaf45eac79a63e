"""POST /v1/traces and /api/v1/otlp/v1/traces — OTLP/HTTP trace ingest (docs/api.md, "OTLP").

The same keys, scope, rate limit, body reader (api.body_reader) and write (api.record_writes) as
POST /api/v1/records; the mapping of spans to records is records.formats.otlp. Answers follow
the OTLP/HTTP specification: 200 with an ExportTraceServiceResponse (partial_success when spans
were rejected), and for errors a google.rpc.Status in the request's encoding, with Retry-After
on 429 and 503.
"""

from __future__ import annotations

import math

from django.db import InterfaceError, OperationalError
from django.http import HttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from google.rpc.status_pb2 import Status
from rest_framework import status
from rest_framework.exceptions import (
    AuthenticationFailed,
    ParseError,
    Throttled,
    UnsupportedMediaType,
)
from rest_framework.views import APIView

from api.auth import KEY_REFUSED, CanIngest
from api.body_reader import read_body
from api.record_writes import write_export
from api.throttles import KeyRateThrottle
from records.formats import otlp
from records.store.writer import ProjectGone

# Seconds an exporter should wait when the database cannot be reached.
DATABASE_RETRY_AFTER = 5
# google.rpc.Code for each HTTP status an OTLP error answer can have.
_RPC_CODES = {400: 3, 401: 16, 403: 7, 404: 5, 405: 12, 413: 3, 415: 3, 429: 8, 503: 14}

DESCRIPTION = """OTLP/HTTP trace export (`application/x-protobuf` or OTLP JSON `application/json`,
optionally `Content-Encoding: gzip`), with `Authorization: Bearer <ingest key>` (e.g.
`OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20<key>`). GenAI semantic-convention spans and
`decisionboard.<kind>` span events become records; see docs/api.md ("OTLP") for the mapping. A span
that maps to nothing, or whose records are rejected, is counted in `partialSuccess.rejectedSpans`
and named in `errorMessage`. Re-sending an export stores nothing twice."""


def encoding_of(content_type: str | None) -> str | None:
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    return media_type if media_type in otlp.ENCODINGS else None


class OtlpTracesView(APIView):
    permission_classes = [CanIngest]
    throttle_classes = [KeyRateThrottle]
    parser_classes: list = []  # the body is read raw

    def perform_content_negotiation(self, request, force=False):
        # The answer's encoding follows the request's Content-Type, not Accept: never a 406.
        return super().perform_content_negotiation(request, force=True)

    @extend_schema(
        summary="Export traces over OTLP/HTTP",
        description=DESCRIPTION,
        request={otlp.PROTOBUF: OpenApiTypes.BINARY, otlp.JSON: OpenApiTypes.OBJECT},
        responses={
            200: OpenApiResponse(
                OpenApiTypes.OBJECT,
                description="ExportTraceServiceResponse; partialSuccess when spans were rejected.",
            ),
            400: OpenApiResponse(description="Not an OTLP export (google.rpc.Status)."),
            413: OpenApiResponse(description="Over the body limit."),
            415: OpenApiResponse(description="Another content type or encoding."),
            429: OpenApiResponse(description="Over the key's rate; see Retry-After."),
            503: OpenApiResponse(description="The database is unreachable; see Retry-After."),
        },
    )
    def post(self, request):
        encoding = encoding_of(request.content_type)
        if encoding is None:
            raise UnsupportedMediaType(
                request.content_type or "(none)",
                detail="OTLP/HTTP takes application/x-protobuf or application/json.",
            )
        try:
            export = otlp.decode_request(read_body(request), encoding)
        except otlp.OtlpDecodeError as exc:
            raise ParseError(str(exc)) from None
        try:
            answer = write_export(request.auth.project, export, now=timezone.now())
        except ProjectGone:  # deleted since its key was read (api.auth keeps keys briefly)
            raise AuthenticationFailed(KEY_REFUSED) from None
        return HttpResponse(otlp.encode_response(answer, encoding), content_type=encoding)

    def handle_exception(self, exc):
        """Every error as a google.rpc.Status in the request's encoding (JSON when it had
        none we speak), keeping DRF's status and headers (Retry-After, WWW-Authenticate)."""
        if isinstance(exc, (OperationalError, InterfaceError)):
            response = HttpResponse(status=status.HTTP_503_SERVICE_UNAVAILABLE)
            response["Retry-After"] = str(DATABASE_RETRY_AFTER)
            message = "The database cannot be reached; nothing was stored. Retry later."
        else:
            response = super().handle_exception(exc)
            detail = getattr(exc, "detail", None)
            message = str(detail) if detail is not None else str(exc)
        encoding = encoding_of(self.request.content_type) or otlp.JSON
        code = _RPC_CODES.get(response.status_code, 2)
        answer = HttpResponse(
            otlp.encode_response(Status(code=code, message=message), encoding),
            status=response.status_code,
            content_type=encoding,
        )
        for header in ("Retry-After", "WWW-Authenticate"):
            if header in response:
                answer[header] = response[header]
        if isinstance(exc, Throttled) and exc.wait is not None:
            # DRF rounds the wait down, so the last second of a window says "0" and an exporter
            # would retry at once into the same window; round up instead.
            answer["Retry-After"] = str(max(1, math.ceil(exc.wait)))
        return answer

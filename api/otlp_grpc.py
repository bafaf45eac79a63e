"""OTLP/gRPC trace ingest: `opentelemetry.proto.collector.trace.v1.TraceService/Export` on its
own port (DECISIONBOARD_OTLP_GRPC_PORT, 4317 by default; `manage.py serve_otlp_grpc`).

The same keys (the `authorization` metadata: `Bearer <ingest key>`), scope, rate limit, size
limit and write (api.record_writes, which maps with records.formats.otlp) as POST /v1/traces
(api/otlp.py), and the same rule: the records are committed before the OK. Errors are gRPC
status codes, as the OTLP specification lists them: UNAUTHENTICATED, PERMISSION_DENIED,
INVALID_ARGUMENT, RESOURCE_EXHAUSTED (over the size limit, or over the key's rate with a
RetryInfo), UNAVAILABLE (the database cannot be reached, with a RetryInfo; nothing was stored).

The method is served with grpcio's generic handler on raw bytes rather than opentelemetry-proto's
generated `add_TraceServiceServicer_to_server`: that one parses the message before the handler
runs and answers a message that is not an export with INTERNAL, where OTLP asks for
INVALID_ARGUMENT naming the problem. gzip (grpc-encoding) is undone by grpcio itself.

Each call runs on a thread of the server's pool, with that thread's own database connection;
old or broken connections are closed before and after each call, as Django does around a
request (`close_old_connections`), so that the receiver recovers by itself after an outage.
"""

from __future__ import annotations

import logging
import math
import time
from concurrent import futures
from dataclasses import dataclass

import grpc
from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone
from google.protobuf import any_pb2
from google.protobuf.duration_pb2 import Duration
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from rest_framework.exceptions import AuthenticationFailed

from api.auth import KEY_REFUSED, CanIngest, key_for_authorization
from api.record_writes import write_export
from api.throttles import KeyRateThrottle
from config.outage import RETRY_AFTER_SECONDS, is_database_outage
from ops.instruments import observe_grpc_request
from records.formats import otlp
from records.models import ApiKey
from records.store.writer import ProjectGone

log = logging.getLogger(__name__)

SERVICE = trace_service_pb2.DESCRIPTOR.services_by_name["TraceService"].full_name
METHOD = "Export"
EXPORT_PATH = f"/{SERVICE}/{METHOD}"
# The Python exporter reads the wait from this trailer; the Collector (Go) from the RetryInfo
# among the details of the status, in grpc-status-details-bin. Both are sent.
RETRY_INFO_TRAILER = "google.rpc.retryinfo-bin"
STATUS_DETAILS_TRAILER = "grpc-status-details-bin"
DEFAULT_THREADS = 8


@dataclass
class Refusal(Exception):
    """An export answered with an error status instead of an ExportTraceServiceResponse."""

    code: grpc.StatusCode
    message: str
    retry_after: int | None = None  # seconds, sent as a RetryInfo


def max_message_bytes() -> int:
    """What gRPC itself lets through: twice the limit, so that a message over the limit but not
    far over it reaches the handler and gets the same answer as over HTTP (api.body_reader
    reads up to twice the limit too); beyond that gRPC refuses it, RESOURCE_EXHAUSTED as well."""
    return 2 * settings.DECISIONBOARD["INGEST_MAX_BODY"]


def export(body: bytes, authorization: str | None) -> trace_service_pb2.ExportTraceServiceResponse:
    """Judge and store one export (`body`, the serialised ExportTraceServiceRequest) sent with
    the `authorization` metadata; the answer, or Refusal. A database outage propagates."""
    try:
        key = key_for_authorization((authorization or "").encode("utf-8", "replace"))
    except AuthenticationFailed as exc:
        raise Refusal(grpc.StatusCode.UNAUTHENTICATED, str(exc.detail)) from None
    if key is None:
        raise Refusal(
            grpc.StatusCode.UNAUTHENTICATED,
            "Send the metadata authorization: Bearer <api key>.",
        )
    if not key.allows(ApiKey.Scope.INGEST):
        raise Refusal(grpc.StatusCode.PERMISSION_DENIED, CanIngest.message)
    throttle = KeyRateThrottle()
    if not throttle.allow_key(key):
        wait = max(1, math.ceil(throttle.wait()))
        raise Refusal(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"Over this key's request rate; retry in {wait} s.",
            retry_after=wait,
        )
    limit = settings.DECISIONBOARD["INGEST_MAX_BODY"]
    if len(body) > limit:
        raise Refusal(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"The message is over the {limit:,}-byte limit; send smaller batches.",
        )
    try:
        request = otlp.decode_request(body, otlp.PROTOBUF)
    except otlp.OtlpDecodeError as exc:
        raise Refusal(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
    try:
        return write_export(key.project, request, now=timezone.now())
    except ProjectGone:  # deleted since its key was read (api.auth keeps keys briefly)
        raise Refusal(grpc.StatusCode.UNAUTHENTICATED, KEY_REFUSED) from None


def _export_call(body: bytes, context: grpc.ServicerContext):
    started = time.monotonic()
    refusal: Refusal | None = None
    try:
        _close_old_connections()
        authorization = dict(context.invocation_metadata()).get("authorization")
        return export(body, authorization)
    except Refusal as exc:
        refusal = exc
    except Exception as exc:
        if not is_database_outage(exc):
            log.exception("OTLP/gRPC export failed")
            refusal = Refusal(grpc.StatusCode.INTERNAL, "The export could not be handled.")
        else:
            log.warning("database unavailable, answering UNAVAILABLE to an export: %s", exc)
            refusal = Refusal(
                grpc.StatusCode.UNAVAILABLE,
                "The database cannot be reached; nothing of this export was stored. "
                f"Retry in {RETRY_AFTER_SECONDS} s.",
                retry_after=RETRY_AFTER_SECONDS,
            )
    finally:
        _close_old_connections()
        code = refusal.code if refusal is not None else grpc.StatusCode.OK
        observe_grpc_request(METHOD, code.name, time.monotonic() - started)
    _abort(context, refusal)


def _close_old_connections() -> None:
    """Django's close_old_connections, which a connection broken by an outage may make raise
    again; the next call's health check replaces it (CONN_HEALTH_CHECKS)."""
    try:
        close_old_connections()
    except Exception as exc:
        if not is_database_outage(exc):
            raise
        log.warning("closing a database connection failed: %s", exc)


def _abort(context: grpc.ServicerContext, refusal: Refusal) -> None:
    """End the call with the refusal's status (raises, as grpcio's abort does)."""
    if refusal.retry_after is not None:
        retry = RetryInfo(retry_delay=Duration(seconds=refusal.retry_after))
        detail = any_pb2.Any()
        detail.Pack(retry)
        status = Status(code=refusal.code.value[0], message=refusal.message, details=[detail])
        context.set_trailing_metadata(
            (
                (RETRY_INFO_TRAILER, retry.SerializeToString()),
                (STATUS_DETAILS_TRAILER, status.SerializeToString()),
            )
        )
    context.abort(refusal.code, refusal.message)


def handler() -> grpc.GenericRpcHandler:
    """TraceService/Export on raw request bytes (see the module's docstring)."""
    export_method = grpc.unary_unary_rpc_method_handler(
        _export_call,
        request_deserializer=None,
        response_serializer=trace_service_pb2.ExportTraceServiceResponse.SerializeToString,
    )
    return grpc.method_handlers_generic_handler(SERVICE, {METHOD: export_method})


def server(host: str, port: int, threads: int = DEFAULT_THREADS) -> grpc.Server:
    """A started receiver on host:port (plain text: TLS, when wanted, is the proxy's, as for
    the web: deploy/nginx). RuntimeError when the address cannot be bound."""
    size = max_message_bytes()
    receiver = grpc.server(
        futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="otlp-grpc"),
        handlers=[handler()],
        options=[
            ("grpc.max_receive_message_length", size),
            # Without this a second receiver would bind the same port and share its calls.
            ("grpc.so_reuseport", 0),
        ],
    )
    if receiver.add_insecure_port(f"{host}:{port}") == 0:
        raise RuntimeError(f"cannot listen on {host}:{port}")
    receiver.start()
    return receiver

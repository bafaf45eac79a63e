"""OTLP trace exports on the wire: an ExportTraceServiceRequest read from protobuf or OTLP JSON,
and an answer (ExportTraceServiceResponse or google.rpc.Status) written in the request's encoding.
Pure functions; the mapping of what is read to records is records.formats.otlp_mapping."""

from __future__ import annotations

import base64
from typing import Any

import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
ENCODINGS = (PROTOBUF, JSON)


class OtlpDecodeError(ValueError):
    """The body is not an ExportTraceServiceRequest in the encoding it claims."""


def decode_request(body: bytes, encoding: str) -> ExportTraceServiceRequest:
    """The export in `body`, protobuf or OTLP JSON (with hex trace and span ids)."""
    request = ExportTraceServiceRequest()
    if encoding == PROTOBUF:
        try:
            request.ParseFromString(body)
        except (DecodeError, RecursionError) as exc:
            raise OtlpDecodeError(f"The body is not an OTLP protobuf export: {exc}.") from None
        return request
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise OtlpDecodeError(f"The body is not valid JSON: {exc}.") from None
    if not isinstance(value, dict):
        raise OtlpDecodeError(
            "The body must be an OTLP JSON export object ({resourceSpans: [...]})."
        )
    _hex_ids_to_base64(value)
    try:
        json_format.ParseDict(value, request, ignore_unknown_fields=True)
    except (json_format.ParseError, RecursionError, TypeError, ValueError) as exc:
        raise OtlpDecodeError(f"The body is not an OTLP JSON export: {exc}.") from None
    return request


def _hex_ids_to_base64(export: dict) -> None:
    """OTLP JSON writes trace and span ids as hex, protobuf's JSON mapping wants base64."""
    for r, resource_spans in enumerate(_items(export, "resourceSpans", "resource_spans")):
        for s, scope_spans in enumerate(_items(resource_spans, "scopeSpans", "scope_spans")):
            for i, span in enumerate(_items(scope_spans, "spans")):
                where = f"resourceSpans[{r}].scopeSpans[{s}].spans[{i}]"
                _convert_ids(
                    span,
                    where,
                    ("traceId", "trace_id", "spanId", "span_id", "parentSpanId", "parent_span_id"),
                )
                for k, link in enumerate(_items(span, "links")):
                    _convert_ids(
                        link, f"{where}.links[{k}]", ("traceId", "trace_id", "spanId", "span_id")
                    )


def _items(parent: Any, *names: str) -> list:
    if not isinstance(parent, dict):
        return []
    for name in names:
        value = parent.get(name)
        if isinstance(value, list):
            return value
    return []


def _convert_ids(obj: Any, where: str, names: tuple[str, ...]) -> None:
    if not isinstance(obj, dict):
        return
    for name in names:
        value = obj.get(name)
        if not isinstance(value, str):
            continue
        try:
            obj[name] = base64.b64encode(bytes.fromhex(value)).decode()
        except ValueError:
            raise OtlpDecodeError(
                f"{where}.{name} must be a hex string (OTLP JSON encodes ids as hex)."
            ) from None


def encode_response(response: Any, encoding: str) -> bytes:
    """An ExportTraceServiceResponse or google.rpc.Status in the request's encoding."""
    if encoding == PROTOBUF:
        return response.SerializeToString()
    return json_format.MessageToJson(response, indent=None).encode()

"""OpenTelemetry traces in, decision records out: the one mapping of OTLP spans to record kinds.

The one public place for the OTLP write (api.record_writes, which the receivers over HTTP and
gRPC both call): an export is decoded (records.formats.otlp_wire), its spans read into plain
`SpanView`s (otlp_spans), the declarations turn spans and span events into records
(otlp_mapping, otlp_events); each record is judged by the same
`records.contract.normalise.normalise_batch` as native ingest, and `settle` here writes the
answer's partial success. Pure functions: no database, no settings, no views.

The mappings (docs/api.md, "OTLP", is the user's copy of this table):

- a GenAI inference span (`gen_ai.operation.name` chat, text_completion, generate_content)
  → `model_call`; the same span failed (status ERROR or `error.type`) → `provider.error`;
- `execute_tool` spans → the `toolCalls` of one `turn` per model response;
- `invoke_agent` spans (and `gen_ai.agent.name`) → the records' agent, and nested agents → sub-runs;
- a span event named `decisionboard.<kind>` → one record of that kind, its attributes the fields.

A span that none of them maps is counted and named in the response's partial success, never
dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from records.contract.normalise import Judged, Limits, NormalisedRecord, normalise_batch
from records.formats.otlp_mapping import map_export
from records.formats.otlp_records import Mapped, Mapping
from records.formats.otlp_spans import spans_of
from records.formats.otlp_wire import (
    ENCODINGS,
    JSON,
    PROTOBUF,
    OtlpDecodeError,
    decode_request,
    encode_response,
)

__all__ = [
    "ENCODINGS",
    "JSON",
    "PROTOBUF",
    "ExportResult",
    "OtlpDecodeError",
    "decode_request",
    "encode_response",
    "export_response",
    "map_export",
    "normalise_export",
    "settle",
    "spans_of",
    "tagged",
]

_MAX_PROBLEMS_SHOWN = 5


@dataclass
class ExportResult:
    spans: int
    records: list[NormalisedRecord]
    rejected_spans: int
    error_message: str


def normalise_export(
    request: ExportTraceServiceRequest, *, now: datetime, limits: Limits | None = None
) -> ExportResult:
    """Map the export and judge each record with records.contract.normalise, as native ingest
    does (api.record_writes runs the same two steps, then stores)."""
    mapping = map_export(request)
    judged = normalise_batch(
        tagged(mapping), now=now, limits=limits or Limits(), scrub=mapping.scrub
    )
    return settle(mapping, judged)


def tagged(mapping: Mapping) -> list[tuple[Mapped, dict]]:
    """The export's records, each tagged with what it was mapped from, for normalise_batch."""
    return [(mapped, mapped.raw) for mapped in mapping.records]


def settle(mapping: Mapping, judged: Judged) -> ExportResult:
    """The export's outcome once its records are judged: a span is rejected (counted once) when
    it maps to nothing or any record from it is rejected; its other, valid records are still
    stored."""
    for mapped, raw, errors in judged.rejected:
        problems = "; ".join(f"{path}: {', '.join(m)}" for path, m in errors.items())
        mapping.reject(mapped.span, f"{mapped.detail or raw['kind']} rejected: {problems}")
    return ExportResult(
        spans=len(mapping.spans),
        records=judged.valid,
        rejected_spans=len(mapping.problems),
        error_message=_summary(mapping),
    )


def _summary(mapping: Mapping) -> str:
    if not mapping.problems:
        return ""
    messages = [m for problems in mapping.problems.values() for m in problems]
    shown = "; ".join(messages[:_MAX_PROBLEMS_SHOWN])
    more = len(messages) - _MAX_PROBLEMS_SHOWN
    rejected = len(mapping.problems)
    head = f"{rejected} of {len(mapping.spans)} spans rejected (see docs/api.md, OTLP): "
    return head + shown + (f"; and {more} more" if more > 0 else "")


def export_response(result: ExportResult) -> ExportTraceServiceResponse:
    """The OTLP answer: partial_success set only when something was rejected."""
    if not result.rejected_spans:
        return ExportTraceServiceResponse()
    return ExportTraceServiceResponse(
        partial_success=ExportTracePartialSuccess(
            rejected_spans=result.rejected_spans, error_message=result.error_message
        )
    )

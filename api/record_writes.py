"""The one write of posted records, whatever the transport (docs/architecture.md, "Write path").

Native JSON and NDJSON (api.ingest), OTLP/HTTP (api.otlp) and OTLP/gRPC (api.otlp_grpc) each read
a body and authenticate its key, then hand the body's decoder to `write_records` or
`write_export`. Both run the same steps: decode, judge every record
(records.contract.normalise.normalise_batch) with the project's redaction rules applied to its
free text first (records.contract.redaction, records.models.redaction), store the valid ones,
priced and committed before this returns (records.store.writer), count them and what was
redacted for /metrics, and nudge the workers after the commit. What differs is only how the
answer names a rejected record: by its index in a native body, by its span in an OTLP export.

The cyclic garbage collector is paused from the decode to the answer (records.gc_pause): a
batch decodes into tens of thousands of objects, none in a cycle, and they are freed before it
comes back on, so no collection walks them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from ops.instruments import (
    UNKNOWN_KIND,
    count_ingest,
    count_redactions,
    count_rejected_spans,
    posted_kind,
)
from records.contract.normalise import Errors, Judged, normalise_batch
from records.contract.redaction import redactor_for
from records.formats import otlp
from records.gc_pause import gc_paused
from records.store.ingest import IngestResult, configured_limits, rejections
from records.store.redaction_rules import project_rules
from records.store.writer import StoreResult, store_records
from workers.dispatch import request_catch_up


@dataclass(slots=True)
class Posted:
    """What a transport decoded: each record's raw JSON value with the tag the answer names it
    by, and the parts of the body that could not be read as a record at all."""

    records: list[tuple[Any, Any]] = field(default_factory=list)  # (tag, raw)
    unreadable: list[tuple[Any, Errors]] = field(default_factory=list)  # (tag, errors)
    # True when a value may hold NUL characters or non-finite numbers (normalise's scrub).
    scrub: bool = False
    # What the tags point into, for the answer (an OTLP export's mapping).
    source: Any = None


# How a transport answers once its batch is judged and stored.
Settle = Callable[[Any, Posted, Judged, StoreResult], Any]


def write_records(project: Any, decode: Callable[[], Posted], *, now: datetime) -> IngestResult:
    """Write a native batch (`decode` reads the body's records, tagged by index); its answer.
    Raises the decoder's errors, and ProjectGone when the key's project was deleted."""
    return _write(project, decode, via="api", now=now, settle=_settle_native)


def write_export(
    project: Any, request: ExportTraceServiceRequest, *, now: datetime
) -> ExportTraceServiceResponse:
    """Write an OTLP export; its answer, with a partial success naming each rejected span.
    Raises ProjectGone when the key's project was deleted."""

    def decode() -> Posted:
        mapping = otlp.map_export(request)
        return Posted(otlp.tagged(mapping), scrub=mapping.scrub, source=mapping)

    return _write(project, decode, via="otlp", now=now, settle=_settle_export)


def _write(project: Any, decode: Callable[[], Posted], *, via: str, now: datetime, settle: Settle):
    redactor = redactor_for(project_rules(project.pk))
    with gc_paused():
        posted = decode()
        judged = normalise_batch(
            posted.records,
            now=now,
            limits=configured_limits(),
            scrub=posted.scrub,
            redactor=redactor,
        )
        stored = store_records(project.pk, judged.valid, now)
        answer = settle(project, posted, judged, stored)
        rejected_kinds = [posted_kind(raw) for _tag, raw, _errors in judged.rejected]
        rejected_kinds += [UNKNOWN_KIND] * len(posted.unreadable)
        count_ingest(via, project, judged.valid, stored.accepted_by_kind, rejected_kinds)
        count_redactions(project, judged.valid)
        # The batch is freed here, while the collector is still off.
        del posted, judged
    if stored.accepted:
        request_catch_up(project.pk)  # after the commit; best effort
    return answer


def _settle_native(
    project: Any, posted: Posted, judged: Judged, stored: StoreResult
) -> IngestResult:
    rejected = rejections(posted.unreadable, judged.rejected)
    return IngestResult(stored.accepted, stored.duplicates, rejected)


def _settle_export(
    project: Any, posted: Posted, judged: Judged, stored: StoreResult
) -> ExportTraceServiceResponse:
    result = otlp.settle(posted.source, judged)
    count_rejected_spans(project, result.rejected_spans)
    return otlp.export_response(result)

"""Real exports (ai_sdk_captures, agents_js_captures) map to exactly the records they mapped to
when mapped_captures.json was written: every field of every record, byte for byte, and the
answer. The mapping's speed-ups must leave what it stores alone; a change meant to alter the
records rewrites the file (`DECISIONBOARD_WRITE_MAPPED_CAPTURES=1 pytest` on this module) and
shows the difference in review."""

from __future__ import annotations

import dataclasses
import json
import os
from datetime import UTC, datetime
from pathlib import Path

from google.protobuf.json_format import ParseDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from records.formats import otlp

HERE = Path(__file__).parent
EXPECTED = HERE / "mapped_captures.json"
NOW = datetime(2030, 1, 1, tzinfo=UTC)


def captured_requests() -> dict[str, list]:
    """Each capture's exports, as the receiver decodes them."""
    out = {}
    for path in sorted(HERE.glob("ai_sdk_captures/*.json")):
        bodies = json.loads(path.read_text())  # ids in base64, as protobuf's JSON mapping
        out[path.stem] = [ParseDict(body, ExportTraceServiceRequest()) for body in bodies]
    for path in sorted(HERE.glob("agents_js_captures/*.json")):  # OTLP JSON: ids in hex
        out[path.stem] = [otlp.decode_request(path.read_bytes(), otlp.JSON)]
    return out


def mapped(requests: list) -> list[dict]:
    out = []
    for request in requests:
        result = otlp.normalise_export(request, now=NOW)
        records = [dataclasses.asdict(r) for r in result.records]
        answer = {"rejected_spans": result.rejected_spans, "error": result.error_message}
        out.append({"records": records, "answer": answer})
    return json.loads(json.dumps(out, default=str))


def test_real_exports_map_to_the_records_they_always_did():
    found = {name: mapped(requests) for name, requests in captured_requests().items()}
    if os.environ.get("DECISIONBOARD_WRITE_MAPPED_CAPTURES"):
        EXPECTED.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    expected = json.loads(EXPECTED.read_text())
    assert found.keys() == expected.keys()
    for name in found:
        assert found[name] == expected[name], name

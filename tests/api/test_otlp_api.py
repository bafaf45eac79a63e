"""POST /v1/traces and /api/v1/otlp/v1/traces: OTLP/HTTP as the specification answers it."""

from __future__ import annotations

import gzip
import json
import zlib

import pytest
from google.protobuf import json_format
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from records.models import ApiKey, Record, Run
from tests.support.factories import DATA, KINDS, record
from tests.support.otlp_payloads import (
    TRACE,
    chat,
    export,
    json_string_form,
    otlp_json,
    span,
    span_id,
)
from tests.support.pages import operator

pytestmark = [pytest.mark.both_dbs]
PROTOBUF = "application/x-protobuf"
PATHS = ["/v1/traces", "/api/v1/otlp/v1/traces"]


def every_kind_export():
    """One span per kind carrying its decisionboard event, and a GenAI chat span."""
    spans = [
        span(f"step {kind}", events=[(f"decisionboard.{kind}", json_string_form(DATA[kind]))])
        for kind in KINDS
    ]
    return export(*spans, span("chat gpt-4o", chat()))


def post(client, body: bytes, content_type: str = PROTOBUF, path: str = "/v1/traces", **extra):
    return client.generic("POST", path, body, content_type=content_type, **extra)


def answer(response) -> ExportTraceServiceResponse:
    assert response["Content-Type"] == PROTOBUF
    return ExportTraceServiceResponse.FromString(response.content)


@pytest.mark.parametrize("path", PATHS)
def test_it_stores_every_kind_from_a_protobuf_export(alice, path):
    response = post(alice.client(), every_kind_export().SerializeToString(), path=path)
    assert response.status_code == 200
    assert not answer(response).HasField("partial_success")
    kinds = sorted(Record.objects.filter(project=alice.project).values_list("kind", flat=True))
    # The chat span: its model call, and the model selection of its request and response models.
    assert kinds == sorted([*KINDS, "model_call", "model_selection"])
    assert Run.objects.get(project=alice.project).run_id == TRACE


def test_it_stores_every_kind_from_an_otlp_json_export_and_answers_in_json(alice):
    response = post(alice.client(), otlp_json(every_kind_export()), "application/json")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content) == {}  # partialSuccess unset: everything was accepted
    assert Record.objects.filter(project=alice.project).count() == len(KINDS) + 2


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_it_takes_compressed_bodies(alice, encoding):
    raw = every_kind_export().SerializeToString()
    body = gzip.compress(raw) if encoding == "gzip" else zlib.compress(raw)
    response = post(alice.client(), body, HTTP_CONTENT_ENCODING=encoding)
    assert response.status_code == 200
    assert Record.objects.filter(project=alice.project).count() == len(KINDS) + 2


def test_a_re_sent_export_stores_nothing_twice(alice):
    body = every_kind_export().SerializeToString()
    assert post(alice.client(), body).status_code == 200
    again = post(alice.client(), body)
    assert again.status_code == 200 and not answer(again).HasField("partial_success")
    assert Record.objects.filter(project=alice.project).count() == len(KINDS) + 2


def test_it_answers_partial_success_and_keeps_the_good_spans(alice):
    bad_pick = {**json_string_form(DATA["tool_choice.pick"]), "confidence": "high"}
    request = export(
        span("chat", chat()),
        span("GET /health"),
        span("pick", events=[("decisionboard.tool_choice.pick", bad_pick)]),
    )
    response = post(alice.client(), request.SerializeToString())
    assert response.status_code == 200
    partial = answer(response).partial_success
    assert partial.rejected_spans == 2
    assert "'GET /health': nothing to map" in partial.error_message
    assert "data.confidence: must be a number, got a string" in partial.error_message
    assert sorted(Record.objects.values_list("kind", flat=True)) == [
        "model_call",
        "model_selection",
    ]


def test_partial_success_in_json_is_camel_case_with_the_count_as_a_string(alice):
    response = post(alice.client(), otlp_json(export(span("GET /"))), "application/json")
    body = json.loads(response.content)
    assert body["partialSuccess"]["rejectedSpans"] == "1"
    assert "nothing to map" in body["partialSuccess"]["errorMessage"]


def error_status(response, content_type: str = PROTOBUF) -> Status:
    assert response["Content-Type"] == content_type
    if content_type == PROTOBUF:
        return Status.FromString(response.content)
    return json_format.Parse(response.content, Status())


@pytest.mark.parametrize("content_type", [PROTOBUF, "application/json"])
def test_it_answers_400_with_a_status_for_an_undecodable_body(alice, content_type):
    response = post(alice.client(), b"\x0a\xff\xff garbage {", content_type)
    assert response.status_code == 400
    assert "not" in error_status(response, content_type).message
    assert Record.objects.count() == 0


def test_it_answers_400_for_a_gzip_body_that_is_not_gzip(alice):
    response = post(alice.client(), b"plain", HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 400
    assert "not valid gzip" in error_status(response).message


def test_it_answers_401_without_a_key_and_403_without_the_ingest_scope(alice):
    body = every_kind_export().SerializeToString()
    from rest_framework.test import APIClient

    missing = post(APIClient(), body)
    assert missing.status_code == 401 and missing["WWW-Authenticate"].startswith("Bearer")
    assert error_status(missing).code == 16  # UNAUTHENTICATED
    read_only = post(alice.client(alice.read_key), body)
    assert read_only.status_code == 403
    assert "ingest scope" in error_status(read_only).message
    assert Record.objects.count() == 0


@pytest.mark.parametrize(
    ("content_type", "encoding"),
    [("text/plain", None), ("application/x-ndjson", None), (PROTOBUF, "br")],
)
def test_it_answers_415_for_other_content_types_and_encodings(alice, content_type, encoding):
    extra = {"HTTP_CONTENT_ENCODING": encoding} if encoding else {}
    response = post(alice.client(), b"x", content_type, **extra)
    assert response.status_code == 415


def test_it_answers_413_over_the_limit_also_once_decompressed(alice, settings):
    settings.DECISIONBOARD = {**settings.DECISIONBOARD, "INGEST_MAX_BODY": 10_000}
    too_big = post(alice.client(), b"\x00" * 10_001)
    assert too_big.status_code == 413
    bomb = post(alice.client(), gzip.compress(b"\x00" * 50_000), HTTP_CONTENT_ENCODING="gzip")
    assert bomb.status_code == 413
    assert "once decompressed" in error_status(bomb).message


def test_it_answers_429_with_retry_after_past_the_key_rate(alice):
    ApiKey.objects.filter(pk=alice.ingest_key_obj.pk).update(rate_limit="2/min")
    body = export(span("chat", chat())).SerializeToString()
    client = alice.client()
    assert [post(client, body).status_code for _ in range(2)] == [200, 200]
    limited = post(client, body)
    assert limited.status_code == 429
    assert 0 < int(limited["Retry-After"]) <= 60
    assert error_status(limited).code == 8  # RESOURCE_EXHAUSTED


def test_an_accept_header_asking_for_protobuf_is_not_a_406(alice):
    body = export(span("chat", chat())).SerializeToString()
    response = post(alice.client(), body, HTTP_ACCEPT=PROTOBUF)
    assert response.status_code == 200


def test_the_records_api_takes_a_gzip_body_too(alice):
    body = gzip.compress(json.dumps({"records": [record(), record("notice")]}).encode())
    response = alice.client().generic(
        "POST",
        "/api/v1/records",
        body,
        content_type="application/json",
        HTTP_CONTENT_ENCODING="gzip",
    )
    assert response.status_code == 200, response.content
    assert response.json()["accepted"] == 2


def test_records_from_otlp_read_back_like_native_ones(alice):
    sid = span_id()
    post(alice.client(), export(span("chat", chat(), span_id_hex=sid)).SerializeToString())
    listed = (
        alice.client(alice.read_key)
        .get("/api/v1/records", {"run_id": TRACE, "kind": "model_call"})
        .json()
    )
    (item,) = listed["results"]
    assert item["id"] == f"otel:{TRACE}:{sid}"
    assert item["kind"] == "model_call" and item["data"]["model"] == "gpt-4o-2026-08-06"


def test_a_nul_in_a_span_name_status_or_attribute_is_stored_replaced_not_a_500(alice):
    attributes = chat(**{"gen_ai.request.model": "gpt\x00-4o"})
    del attributes["gen_ai.response.model"]
    request = export(
        span("chat\x00", chat(), error="bad\x00thing"),
        span("chat", attributes),
    )
    response = post(alice.client(), request.SerializeToString())
    assert response.status_code == 200
    stored = {r.kind: r for r in Record.objects.all()}
    assert stored["provider.error"].data["message"] == "bad\ufffdthing"
    assert stored["model_call"].data["model"] == "gpt\ufffd-4o"


def test_a_nul_in_a_string_of_an_array_attribute_is_stored_replaced(alice):
    # Arrays of strings only, and strings among other values, are read two ways.
    only_strings = chat(**{"gen_ai.response.finish_reasons": ["stop\x00now"]})
    mixed = chat(**{"gen_ai.response.finish_reasons": ["length", 7, "stop\x00now"]})
    request = export(span("chat", only_strings), span("chat", mixed, start_ms=2000))
    response = post(alice.client(), request.SerializeToString())
    assert response.status_code == 200
    reasons = sorted(
        r.data["otel"]["finishReasons"] for r in Record.objects.filter(kind="model_call")
    )
    assert reasons == [["length", "stop\ufffdnow"], ["stop\ufffdnow"]]


def test_a_long_array_sent_again_with_a_nul_is_stored_replaced_each_time(alice):
    # Long arrays of strings are remembered by their bytes: a clean one must not vouch for
    # one that differs by a NUL, sent in a later export.
    clean = [f"stop-{n}-" + "x" * 60 for n in range(8)]
    dirty = [*clean, "stop\x00now"]
    for n, reasons in enumerate((clean, dirty, dirty)):
        attributes = chat(**{"gen_ai.response.finish_reasons": reasons})
        request = export(span("chat", attributes, start_ms=1000 * n))
        assert post(alice.client(), request.SerializeToString()).status_code == 200
    stored = [r.data["otel"]["finishReasons"] for r in Record.objects.filter(kind="model_call")]
    assert sorted(stored, key=len) == [clean, [*clean, "stop\ufffdnow"], [*clean, "stop\ufffdnow"]]


def test_a_nul_in_a_field_the_metrics_group_by_is_stored_replaced_on_native_ingest_too(alice):
    # The scrub replaced it in `data` but the model column was derived before it: a 500.
    body = json.dumps({"records": [record("model_call", data={"model": "gpt\u0000-4o"})]})
    response = alice.client().generic(
        "POST", "/api/v1/records", body, content_type="application/json"
    )
    assert response.status_code == 200
    assert Record.objects.get().model == "gpt\ufffd-4o"


def test_the_run_timeline_says_what_a_span_lacked(alice):
    attributes = chat()
    del attributes["gen_ai.provider.name"]
    del attributes["gen_ai.usage.input_tokens"]
    body = export(span("chat", attributes)).SerializeToString()
    assert post(alice.client(), body).status_code == 200
    page = operator("alice", alice).get(f"/runs/{TRACE}/").content.decode()
    assert "this span lacked gen_ai.provider.name" in page
    assert "this span reported no token counts (stored as 0)" in page

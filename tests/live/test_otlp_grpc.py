"""OTLP/gRPC ingest: the receiver (`manage.py serve_otlp_grpc`) as a real process on a free
loopback port, the real OpenTelemetry SDK and its gRPC exporter, and a raw gRPC client for the
error statuses an exporter must be able to tell apart."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys

import grpc
import psycopg
import pytest
import requests
from google.rpc.error_details_pb2 import RetryInfo
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub
from opentelemetry.sdk.trace.export import SpanExportResult

from api.otlp_grpc import EXPORT_PATH
from records.models import ApiKey, Project, Record, Run
from tests.support.factories import KINDS
from tests.support.live import (
    GRPC_BODY_LIMIT,
    STARTUP_SECONDS,
    grpc_receiver,
    private_cluster,
    wait_until,
)
from tests.support.metrics_scrape import TOKEN, parse, value
from tests.support.otlp_payloads import finished_spans
from workers import processes

EXPECTED_KINDS = sorted([*KINDS, "model_call", "provider.error", "turn"])


@pytest.fixture(scope="module")
def servers(django_db_setup, tmp_path_factory):
    """The receiver and gunicorn on the test database, counting into one metrics folder."""
    from tests.support.services import database_url

    var = tmp_path_factory.mktemp("otlp-grpc")
    port = processes.free_port()
    env = dict(
        os.environ,
        DATABASE_URL=database_url(),
        DECISIONBOARD_VAR_DIR=str(var),
        DECISIONBOARD_NUDGE_WORKERS="0",
        DECISIONBOARD_METRICS_TOKEN=TOKEN,
    )
    web = processes.web_command(f"127.0.0.1:{port}", 1)
    with (
        grpc_receiver(var, database_url(), DECISIONBOARD_METRICS_TOKEN=TOKEN) as address,
        processes.running(web, env=env, log=var / "web.log"),
    ):
        base = f"http://127.0.0.1:{port}"
        wait_until(
            lambda: requests.get(f"{base}/healthz", timeout=10).ok, STARTUP_SECONDS, "gunicorn"
        )
        yield address, base


@pytest.fixture
def keys(transactional_db):
    project = Project.objects.create(name="acme")
    return (
        project,
        ApiKey.issue(project, ApiKey.Scope.INGEST)[1],
        ApiKey.issue(project, ApiKey.Scope.READ)[1],
    )


def export_raw(address: str, body: bytes, key: str | None, **call) -> ExportTraceServiceResponse:
    """One TraceService/Export call carrying `body` as it is (no serialising on this side)."""
    metadata = (("authorization", f"Bearer {key}"),) if key else ()
    with grpc.insecure_channel(address) as channel:
        method = channel.unary_unary(EXPORT_PATH)
        return ExportTraceServiceResponse.FromString(
            method(body, metadata=metadata, timeout=30, **call)
        )


def refused(address: str, body: bytes, key: str | None, **call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        export_raw(address, body, key, **call)
    return caught.value


def an_export() -> bytes:
    return encode_spans(finished_spans()).SerializeToString()


def scrape(base: str) -> dict:
    response = requests.get(
        f"{base}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    )
    assert response.status_code == 200, response.text
    return parse(response.text)


def test_the_otlp_grpc_exporter_lands_spans_as_records_readable_through_the_api(
    servers, keys, monkeypatch
):
    address, base = servers
    project, ingest_key, read_key = keys
    # Configured as any OpenTelemetry SDK is, by environment; gzip, as the Collector sends too.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://{address}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"authorization=Bearer%20{ingest_key}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    exporter = OTLPSpanExporter(insecure=True)
    spans = finished_spans()
    assert exporter.export(spans) == SpanExportResult.SUCCESS

    kinds = sorted(Record.objects.filter(project=project).values_list("kind", flat=True))
    assert kinds == EXPECTED_KINDS
    trace_id = f"{spans[0].context.trace_id:032x}"
    run = Run.objects.get(project=project, run_id=trace_id)
    assert (run.agent, run.session_id) == ("support", "conv-7")

    auth = {"Authorization": f"Bearer {read_key}"}
    detail = requests.get(f"{base}/api/v1/runs/{trace_id}", headers=auth, timeout=30)
    assert detail.status_code == 200
    (sub_run,) = Run.objects.filter(project=project, parent_run_id=trace_id)
    assert [r["run_id"] for r in detail.json()["sub_runs"]] == [sub_run.run_id]
    listed = requests.get(
        f"{base}/api/v1/records", params={"run_id": trace_id}, headers=auth, timeout=30
    )
    assert listed.status_code == 200
    assert {r["kind"] for r in listed.json()["results"]} >= {"model_call", *KINDS}

    # A batch resent (its answer lost) stores nothing twice.
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    assert Record.objects.filter(project=project).count() == len(EXPECTED_KINDS)
    exporter.shutdown()


def test_a_collector_style_export_of_several_resources_in_one_gzip_message_lands(servers, keys):
    """What the Collector's otlp exporter sends (docs: "Through an OpenTelemetry Collector"):
    the batches of several services merged into one request, gzip, the key as metadata."""
    address, _ = servers
    project, ingest_key, _ = keys
    merged = ExportTraceServiceRequest()
    merged.MergeFrom(encode_spans(finished_spans()))
    merged.MergeFrom(encode_spans(finished_spans()))
    assert len(merged.resource_spans) == 2
    with grpc.insecure_channel(address, compression=grpc.Compression.Gzip) as channel:
        answer = TraceServiceStub(channel).Export(
            merged, metadata=(("authorization", f"Bearer {ingest_key}"),), timeout=30
        )
    assert answer.partial_success.rejected_spans == 2
    assert Record.objects.filter(project=project).count() == 2 * len(EXPECTED_KINDS)


def test_a_span_with_nothing_to_map_is_a_partial_success_naming_it(servers, keys):
    address, _ = servers
    project, ingest_key, _ = keys
    answer = export_raw(address, an_export(), ingest_key)
    assert answer.partial_success.rejected_spans == 1
    assert "'GET /internal/health': nothing to map" in answer.partial_success.error_message
    assert Record.objects.filter(project=project).count() == len(EXPECTED_KINDS)


def test_a_bad_or_missing_key_is_unauthenticated_and_a_read_key_permission_denied(servers, keys):
    address, base = servers
    project, _, read_key = keys
    before = scrape(base)
    bad = refused(address, an_export(), "dbk_not-a-key")
    assert bad.code() == grpc.StatusCode.UNAUTHENTICATED
    assert bad.details() == "Unknown or revoked API key."
    missing = refused(address, an_export(), None)
    assert missing.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "authorization: Bearer <api key>" in missing.details()
    denied = refused(address, an_export(), read_key)
    assert denied.code() == grpc.StatusCode.PERMISSION_DENIED
    assert denied.details() == "This API key lacks the ingest scope."
    assert not Record.objects.filter(project=project).exists()

    # /metrics counts the receiver's calls by status, as it counts HTTP requests.
    after = scrape(base)
    name = "decisionboard_grpc_request_duration_seconds_count"

    def counted(code: str) -> float:
        return value(after, name, method="Export", code=code) - value(
            before, name, method="Export", code=code
        )

    assert (counted("UNAUTHENTICATED"), counted("PERMISSION_DENIED")) == (2, 1)


def test_bytes_that_are_not_an_export_are_an_invalid_argument(servers, keys):
    address, _ = servers
    project, ingest_key, _ = keys
    error = refused(address, b"\x0a\xff\xff\xff\x0fnot a protobuf", ingest_key)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith("The body is not an OTLP protobuf export")
    assert not Record.objects.filter(project=project).exists()


def oversized_export(size: int) -> bytes:
    """A well-formed export of one span whose attribute makes the message `size` bytes or more."""
    request = ExportTraceServiceRequest()
    span = (
        request.resource_spans.add()
        .scope_spans.add()
        .spans.add(trace_id=b"t" * 16, span_id=b"s" * 8, name="big")
    )
    attribute = span.attributes.add(key="padding")
    attribute.value.string_value = "x" * size
    return request.SerializeToString()


@pytest.mark.parametrize(
    "size", [GRPC_BODY_LIMIT + 1024, 4 * GRPC_BODY_LIMIT], ids=["over", "far-over"]
)
def test_a_message_over_the_ingest_limit_is_resource_exhausted(servers, keys, size):
    address, _ = servers
    project, ingest_key, _ = keys
    error = refused(address, oversized_export(size), ingest_key)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert not Record.objects.filter(project=project).exists()


def test_a_gzip_message_is_judged_by_its_size_once_inflated(servers, keys):
    address, _ = servers
    project, ingest_key, _ = keys
    body = oversized_export(4 * GRPC_BODY_LIMIT)
    assert len(gzip.compress(body)) < GRPC_BODY_LIMIT // 10
    error = refused(address, body, ingest_key, compression=grpc.Compression.Gzip)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert not Record.objects.filter(project=project).exists()


def test_a_key_over_its_rate_is_resource_exhausted_with_the_wait(servers, keys):
    address, _ = servers
    project, ingest_key, _ = keys
    ApiKey.objects.filter(project=project).update(rate_limit="1/60s")
    export_raw(address, an_export(), ingest_key)
    error = refused(address, an_export(), ingest_key)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "Over this key's request rate" in error.details()
    trailers = dict(error.trailing_metadata())
    wait = RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"]).retry_delay.seconds
    assert 1 <= wait <= 60
    assert Record.objects.filter(project=project).count() == len(EXPECTED_KINDS)


_SETUP = """
from records.models import ApiKey, Project
print(ApiKey.issue(Project.objects.create(name="acme"), ApiKey.Scope.INGEST)[1])
"""


def test_a_database_outage_is_unavailable_stores_nothing_and_recovers_by_itself(tmp_path):
    with private_cluster() as cluster:
        database = cluster.url("decisionboard")
        env = dict(os.environ, DATABASE_URL=database, DECISIONBOARD_VAR_DIR=str(tmp_path))
        manage = [sys.executable, "manage.py"]
        subprocess.run([*manage, "migrate", "-v", "0"], cwd=processes.BASE_DIR, env=env,
                       check=True, timeout=300)  # fmt: skip
        key = subprocess.run(
            [*manage, "shell", "-c", _SETUP], cwd=processes.BASE_DIR, env=env, check=True,
            capture_output=True, text=True, timeout=120,
        ).stdout.split()[-1]  # fmt: skip

        def stored() -> int:
            with psycopg.connect(database) as conn:
                return conn.execute("SELECT count(*) FROM records_record").fetchone()[0]

        first, second = finished_spans(), finished_spans()
        with grpc_receiver(tmp_path, database) as address:
            export_raw(address, encode_spans(first).SerializeToString(), key)
            assert stored() == len(EXPECTED_KINDS)
            cluster.stop()
            error = refused(address, encode_spans(second).SerializeToString(), key)
            assert error.code() == grpc.StatusCode.UNAVAILABLE
            assert "nothing of this export was stored" in error.details()
            trailers = dict(error.trailing_metadata())
            assert RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"]).retry_delay.seconds
            cluster.start()
            assert stored() == len(EXPECTED_KINDS)  # nothing of the refused export
            # The exporter's retry, once the database is back: no restart needed.
            export_raw(address, encode_spans(second).SerializeToString(), key)
            assert stored() == 2 * len(EXPECTED_KINDS)

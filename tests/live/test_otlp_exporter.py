"""The real OpenTelemetry SDK and OTLP/HTTP exporter sending to the product under gunicorn."""

from __future__ import annotations

import time

import pytest
import requests
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace.export import SpanExportResult

from records.catchup import catch_up
from records.models import ApiKey, Project, Record, Run
from tests.support.factories import DATA, KINDS
from tests.support.live import web_server
from tests.support.otlp_payloads import finished_spans, otlp_json


@pytest.fixture(scope="module")
def base(django_db_setup, tmp_path_factory):
    with web_server(tmp_path_factory.mktemp("otlp-web")) as url:
        yield url


@pytest.fixture
def keys(transactional_db):
    project = Project.objects.create(name="acme")
    ingest = ApiKey.issue(project, ApiKey.Scope.INGEST)
    return project, ingest[0], ingest[1], ApiKey.issue(project, ApiKey.Scope.READ)[1]


class Answers:
    """A requests session that keeps every response the exporter got."""

    def __init__(self):
        self.session = requests.Session()
        self.responses: list[requests.Response] = []
        self.session.hooks["response"].append(lambda r, *a, **k: self.responses.append(r))


def test_the_otlp_http_exporter_lands_genai_spans_and_events_as_records_runs_and_metrics(
    base, keys, monkeypatch
):
    project, _, ingest_key, read_key = keys
    # Configured as any OpenTelemetry SDK is: the base endpoint and the header, by environment.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", base)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"Authorization=Bearer%20{ingest_key}")
    answers = Answers()
    exporter = OTLPSpanExporter(compression=Compression.Gzip, session=answers.session)
    spans = finished_spans()
    assert exporter.export(spans) == SpanExportResult.SUCCESS

    (response,) = answers.responses
    assert response.request.url == f"{base}/v1/traces"
    partial = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert partial.rejected_spans == 1
    assert "'GET /internal/health': nothing to map" in partial.error_message

    kinds = sorted(Record.objects.filter(project=project).values_list("kind", flat=True))
    # Every kind from its event; a model_call, a provider.error and a turn from GenAI spans.
    assert kinds == sorted([*KINDS, "model_call", "provider.error", "turn"])
    trace_id = f"{spans[0].context.trace_id:032x}"
    run = Run.objects.get(project=project, run_id=trace_id)
    assert (run.agent, run.session_id) == ("support", "conv-7")
    (sub_run,) = Run.objects.filter(project=project, parent_run_id=trace_id)
    assert sub_run.agent == "researcher"
    assert Record.objects.get(run_id=sub_run.run_id).kind == "provider.error"

    # Read back through the API like native records: the run with its sub-run, and metrics.
    auth = {"Authorization": f"Bearer {read_key}"}
    detail = requests.get(f"{base}/api/v1/runs/{trace_id}", headers=auth, timeout=30).json()
    assert [r["run_id"] for r in detail["sub_runs"]] == [sub_run.run_id]
    catch_up()
    errors = requests.get(
        f"{base}/api/v1/metrics/provider_errors",
        params={"interval": "day", "group_by": "model"},
        headers=auth,
        timeout=30,
    ).json()
    # The failed chat span's, and the decisionboard.provider.error event's.
    totals = {(t["group"]["model"], t["value"]) for t in errors["totals"]}
    assert totals == {("gpt-4o", 1), (DATA["provider.error"]["model"], 1)}

    # The exporter retries a batch whose answer it lost: the second export stores nothing new.
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    assert Record.objects.filter(project=project).count() == len(kinds)
    exporter.shutdown()


def test_an_otlp_json_export_of_the_same_spans_lands_the_same_records(base, keys):
    project, _, ingest_key, _ = keys
    body = otlp_json(encode_spans(finished_spans()))
    response = requests.post(
        f"{base}/api/v1/otlp/v1/traces",
        data=body,
        headers={"Authorization": f"Bearer {ingest_key}", "Content-Type": "application/json"},
        timeout=30,
    )
    assert response.status_code == 200
    assert response.json()["partialSuccess"]["rejectedSpans"] == "1"
    kinds = sorted(Record.objects.filter(project=project).values_list("kind", flat=True))
    assert kinds == sorted([*KINDS, "model_call", "provider.error", "turn"])


def test_the_exporter_waits_out_retry_after_when_the_key_is_over_its_rate(base, keys):
    project, key_obj, ingest_key, _ = keys
    ApiKey.objects.filter(pk=key_obj.pk).update(rate_limit="1/5s")
    answers = Answers()
    exporter = OTLPSpanExporter(
        endpoint=f"{base}/v1/traces",
        headers={"Authorization": f"Bearer {ingest_key}"},
        session=answers.session,
        timeout=30,
    )
    spans = finished_spans()
    time.sleep(5 - time.time() % 5 + 0.05)  # start of a rate window: both exports fall in it
    assert exporter.export(spans[:1]) == SpanExportResult.SUCCESS
    started = time.monotonic()
    assert exporter.export(spans[1:]) == SpanExportResult.SUCCESS
    waited = time.monotonic() - started
    statuses = [r.status_code for r in answers.responses]
    assert statuses == [200, 429, 200]
    retry_after = int(answers.responses[1].headers["Retry-After"])
    assert 1 <= retry_after <= 5
    assert waited >= retry_after - 0.2  # waited as told, not the exporter's own short backoff
    assert Record.objects.filter(project=project).count() == len(KINDS) + 3


def test_it_answers_503_with_retry_after_when_the_database_is_down(tmp_path):
    from workers import processes

    nowhere = f"postgres://postgres@127.0.0.1:{processes.free_port()}/decisionboard"
    with web_server(tmp_path, database=nowhere) as down:
        response = requests.post(
            f"{down}/v1/traces",
            data=b"",
            headers={"Authorization": "Bearer dbk_x", "Content-Type": "application/x-protobuf"},
            timeout=30,
        )
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "5"
    assert response.headers["Content-Type"] == "application/x-protobuf"

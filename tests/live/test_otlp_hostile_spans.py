"""Hostile spans against the live receivers, OTLP/HTTP (gunicorn) and OTLP/gRPC
(`manage.py serve_otlp_grpc`): thousands of tool definitions, tool schemas that are not JSON,
spans without ids, megabyte attribute values, tool calls without names. Each answer is a success
whose partial_success counts every rejected span and says why; the spans that can be kept are
stored. Never a 5xx, never INTERNAL."""

from __future__ import annotations

import json
import os

import grpc
import pytest
import requests
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from api.otlp_grpc import EXPORT_PATH
from records.models import ApiKey, Project, Record
from tests.support.live import wait_until, web_server
from tests.support.otlp_payloads import chat, export, otlp_json, span
from workers import processes

MB = 1_000_000
# Big enough for the megabyte values below: they are to reach the mapping, not the size limit.
LIMIT = 8 * MB


def llm(**attributes):
    return {"openinference.span.kind": "LLM", "llm.provider": "openai",
            "llm.model_name": "gpt-4o-mini", **attributes}  # fmt: skip


def without_ids(name: str, attributes: dict):
    out = span(name, attributes)
    out.ClearField("trace_id")
    out.ClearField("span_id")
    return out


def hostile_export() -> tuple[ExportTraceServiceRequest, dict[str, str]]:
    """The export, and for each span expected to be rejected a part of the reason given."""
    definitions = json.dumps([{"type": "function", "name": f"tool_{i}"} for i in range(10_000)])
    oi_tools = {f"llm.tools.{i}.tool.json_schema": json.dumps({"name": f"tool_{i}"})
                for i in range(10_000)}  # fmt: skip
    nameless_part = {"type": "tool_call", "id": "c1", "arguments": {}}
    spans = [
        span("genai 10k tools", chat(**{"gen_ai.tool.definitions": definitions})),
        span("oi 10k tools", llm(**oi_tools)),
        span("genai schema", chat(**{"gen_ai.tool.definitions": "[{not json"})),
        span("oi schema", llm(**{"llm.tools.0.tool.json_schema": "{not json"})),
        without_ids("no ids", chat()),
        without_ids("no ids either", llm()),
        span("megabyte model", chat(model="m" * MB)),
        span(
            "megabyte tool name",
            chat(**{"gen_ai.tool.definitions": json.dumps([{"name": "t" * MB}])}),
        ),  # fmt: skip
        span("n" * MB, chat()),
        span(
            "genai nameless call",
            chat(
                **{
                    "gen_ai.output.messages": json.dumps(
                        [{"role": "assistant", "parts": [nameless_part]}]
                    )
                }
            ),
        ),  # fmt: skip
        span(
            "oi nameless call",
            llm(**{"llm.output_messages.0.message.tool_calls.0.tool_call.id": "c1"}),
        ),
        # Kept: a megabyte of input messages that are not JSON, and a plain call.
        span("megabyte input", chat(**{"gen_ai.input.messages": "x" * MB})),
        span("plain", chat()),
    ]
    reasons = {
        "genai 10k tools": "data.offered: must have at most 1000 items",
        "oi 10k tools": "data.offered: must have at most 1000 items",
        "genai schema": "gen_ai.tool.definitions is not a JSON array",
        "oi schema": "llm.tools.0.tool.json_schema is not JSON",
        "no ids": "no trace id or span id",
        "no ids either": "no trace id or span id",
        "megabyte model": "data.model: must be at most 200 characters",
        "megabyte tool name": "must be at most",
        "n" * 120 + "…": "must be at most",
        "genai nameless call": "a tool_call without name",
        "oi nameless call": "has no tool_call.function.name",
    }
    return export(*spans), reasons


@pytest.fixture(scope="module")
def servers(django_db_setup, tmp_path_factory):
    from tests.support.services import database_url

    var = tmp_path_factory.mktemp("otlp-hostile")
    os.environ["DECISIONBOARD_INGEST_MAX_BODY"] = str(LIMIT)  # read by both processes
    try:
        port = processes.free_port()
        env = dict(os.environ, DATABASE_URL=database_url(), DECISIONBOARD_VAR_DIR=str(var),
                   DECISIONBOARD_NUDGE_WORKERS="0")  # fmt: skip
        command = processes.otlp_grpc_command("127.0.0.1", port, "--threads", "2")
        with (
            web_server(var) as base,
            processes.running(command, env=env, log=var / f"otlp-grpc-{port}.log"),
        ):
            address = f"127.0.0.1:{port}"
            with grpc.insecure_channel(address) as channel:
                grpc.channel_ready_future(channel).result(timeout=60)
            yield base, address
    finally:
        os.environ.pop("DECISIONBOARD_INGEST_MAX_BODY", None)


@pytest.fixture
def ingest_key(transactional_db):
    project = Project.objects.create(name="acme")
    return project, ApiKey.issue(project, ApiKey.Scope.INGEST)[1]


def over_http(base: str, key: str, body: bytes, content_type: str) -> ExportTraceServiceResponse:
    response = requests.post(f"{base}/v1/traces", data=body, timeout=120,
                             headers={"Authorization": f"Bearer {key}",
                                      "Content-Type": content_type})  # fmt: skip
    assert response.status_code == 200, response.text[:2000]
    if content_type == "application/json":
        from google.protobuf import json_format

        return json_format.Parse(response.text, ExportTraceServiceResponse())
    return ExportTraceServiceResponse.FromString(response.content)


def over_grpc(address: str, key: str, body: bytes) -> ExportTraceServiceResponse:
    with grpc.insecure_channel(
        address, options=[("grpc.max_send_message_length", LIMIT)]
    ) as channel:
        method = channel.unary_unary(EXPORT_PATH)
        answer = method(body, metadata=(("authorization", f"Bearer {key}"),), timeout=120)
    return ExportTraceServiceResponse.FromString(answer)


def assert_every_rejection_is_counted_and_explained(answer, reasons, project) -> None:
    partial = answer.partial_success
    assert partial.rejected_spans == len(reasons), partial.error_message[:3000]
    message = partial.error_message
    # The answer names the first few problems and how many more; no megabyte value in it.
    assert message.startswith(f"{len(reasons)} of 13 spans rejected")
    assert len(message) < 10_000
    shown = [name for name in reasons if repr(name) in message]
    assert len(shown) >= 5
    for name in shown:
        assert reasons[name] in message.split(repr(name), 1)[1], (name, message[:3000])
    kept = Record.objects.filter(project=project, kind="model_call").values_list("data", flat=True)
    spans = {data["otel"]["span"] for data in kept}
    # Every model call that could be read is stored, the rejected turns' calls among them.
    assert {"megabyte input", "plain", "genai 10k tools", "oi 10k tools"} <= spans


@pytest.mark.parametrize("encoding", ["application/x-protobuf", "application/json"])
def test_hostile_spans_over_http_are_counted_and_explained_never_a_5xx(
    servers, ingest_key, encoding
):
    base, _ = servers
    project, key = ingest_key
    request, reasons = hostile_export()
    body = request.SerializeToString() if encoding.endswith("protobuf") else otlp_json(request)
    answer = over_http(base, key, body, encoding)
    assert_every_rejection_is_counted_and_explained(answer, reasons, project)


def test_hostile_spans_over_grpc_are_counted_and_explained_never_internal(servers, ingest_key):
    _, address = servers
    project, key = ingest_key
    request, reasons = hostile_export()
    answer = over_grpc(address, key, request.SerializeToString())
    assert_every_rejection_is_counted_and_explained(answer, reasons, project)
    # And the receiver still answers the next export.
    wait_until(lambda: over_grpc(address, key, export(span("after", chat())).SerializeToString())
               is not None, 30, "the receiver after the hostile export")  # fmt: skip

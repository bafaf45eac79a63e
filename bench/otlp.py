"""OTLP ingest (HTTP and gRPC) and the Python client against native JSON ingest, measured in the
same run.

    .venv/bin/python bench/otlp.py [--records 50000] [--batch 500] [--web-workers 2]
                                   [--clients 1] [--rounds 6]
                                   [--shape events|openinference|ai_sdk]
                                   [--database decisionboard_bench_otlp]

1. Recreates a scratch database (`--database`), migrates it, issues three keys (one
   project per path, so that no path's records are duplicates of another's).
2. Serialises the same records up front twice, as native JSON batches and as OTLP protobuf
   exports. `--shape events` (the default): the demo records, one span each, the record a
   decisionboard.<kind> event (lists and objects as JSON strings, the envelope as
   decisionboard.* attributes). `--shape openinference`: OpenInference LLM spans as its
   instrumentations send them (model, token counts, a dozen offered tools as JSON schemas, a
   tool call, messages), four a trace; the native set is what the mapping makes of them (a
   model_call, a model_selection and a tool-decision turn each), so both store the same records.
   `--shape ai_sdk`: the Vercel AI SDK's own spans (AI SDK 4 to 6) as one agent run exports
   them: an `ai.generateText`, three `ai.generateText.doGenerate` steps (offered tools in
   `ai.prompt.tools`, the tool choice, the called tools with their ids, usage, metadata) and three
   `ai.toolCall` executions linked by id; the native set is again what the mapping makes.
3. Starts the product under gunicorn, and the OTLP/gRPC receiver (`manage.py serve_otlp_grpc`),
   and posts each set from `--clients` processes over keep-alive connections: records / wall
   time for each. The OTLP exports go both to /v1/traces and, the same bytes, to the gRPC
   receiver's TraceService/Export. The sets are sent in `--rounds` slices, native, OTLP/HTTP and
   OTLP/gRPC in turn (the order rotating each round), so that a shared machine's changing load
   weighs on all alike.
4. Sends the same records through decisionboard_client from one thread: the time spent inside
   its calls (the agent's cost per record) and the records per second until flush() returns.

Prints as its last lines `otlp N rec/s, native M rec/s, ratio R; client U µs/record, client C
rec/s, ratio Q` (goals: R >= 0.7, U < 20, Q >= 0.8 of native with the same number of clients)
and `otlp grpc G rec/s, otlp http N rec/s, ratio S` (goal: S >= 1).
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import multiprocessing
import os
import sys
import time
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import exit_on_signals, gunicorn, setup_django, wait_for_port  # noqa: E402
from bench.results import record_result  # noqa: E402
from workers.processes import free_port, otlp_grpc_command, running  # noqa: E402

ENVELOPE = ("id", "run_id", "agent", "session_id", "parent_run_id")
# The client processes start afresh rather than fork: a forked child inherits this process's
# grpcio and Django state, which a fork does not carry over safely; a child blocked for good
# would leave pool.map waiting forever.
CLIENTS = multiprocessing.get_context("spawn")
# A round's clients must answer by then: a stuck one fails the run instead of hanging it.
ROUND_SECONDS = 600


def post_batches(args: tuple[int, str, str, str, list[bytes]]) -> float:
    """One client process: post its batches in order over one keep-alive connection; the
    seconds from the connection open to the last answer."""
    port, key, path, content_type, bodies = args
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": content_type}
    conn.connect()
    start = time.perf_counter()
    for body in bodies:
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        payload = response.read()
        # OTLP answers {} (protobuf: empty) when every span was accepted.
        if response.status != 200 or (content_type != "application/json" and payload):
            raise RuntimeError(f"HTTP {response.status}: {payload[:300]!r}")
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed


def export_batches(args: tuple[str, str, str, list[bytes]]) -> float:
    """One client process: export its batches in order over one gRPC channel (opened here, in
    the client process); the seconds from the channel ready to the last answer. An exporter
    keeps its channel for its life, and opening one costs a new process tens of milliseconds
    that no batch pays, as a keep-alive connection's open is left out of post_batches."""
    import grpc

    address, path, key, bodies = args
    with grpc.insecure_channel(address) as channel:
        grpc.channel_ready_future(channel).result(timeout=30)
        export = channel.unary_unary(path)  # bytes in, bytes out: no re-serialising
        start = time.perf_counter()
        for body in bodies:
            answer = export(body, metadata=(("authorization", f"Bearer {key}"),), timeout=300)
            if answer:  # empty when every span was accepted
                raise RuntimeError(f"gRPC partial success: {answer[:300]!r}")
        return time.perf_counter() - start


def timed_exports(address: str, key: str, bodies: list[bytes], clients: int) -> float:
    """The round's seconds: its slowest client's, each timed from its channel ready."""
    from api.otlp_grpc import EXPORT_PATH

    shares = [(address, EXPORT_PATH, key, bodies[i::clients]) for i in range(clients)]
    with CLIENTS.Pool(clients) as pool:
        return max(pool.map_async(export_batches, shares).get(ROUND_SECONDS))


@contextmanager
def otlp_grpc_receiver(threads: int):
    """The OTLP/gRPC receiver on a free port; yields its address once it accepts connections."""
    port = free_port()
    command = otlp_grpc_command("127.0.0.1", port, "--threads", str(threads))
    with running(command, env=dict(os.environ), timeout=30) as proc:
        wait_for_port(port, proc, "the OTLP/gRPC receiver", 60)
        yield f"127.0.0.1:{port}"


def otlp_export(records: list[dict]) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    def kv(key: str, value) -> KeyValue:
        if isinstance(value, bool):
            return KeyValue(key=key, value=AnyValue(bool_value=value))
        if isinstance(value, int):
            return KeyValue(key=key, value=AnyValue(int_value=value))
        if isinstance(value, float):
            return KeyValue(key=key, value=AnyValue(double_value=value))
        if isinstance(value, (list, dict)):
            value = json.dumps(value, separators=(",", ":"))
        return KeyValue(key=key, value=AnyValue(string_value=value))

    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for record in records:
        ts = datetime.fromisoformat(record["ts"].replace("Z", "+00:00"))
        when = int(ts.timestamp() * 1e9)
        digest = hashlib.sha256(record["id"].encode()).digest()
        span = scope.spans.add(
            trace_id=digest[:16],
            span_id=digest[16:24],
            name="decision",
            start_time_unix_nano=when,
            end_time_unix_nano=when,
        )
        attributes = [kv(k, v) for k, v in record["data"].items() if v is not None]
        attributes += [kv(f"decisionboard.{k}", record[k]) for k in ENVELOPE if k in record]
        span.events.add(
            name=f"decisionboard.{record['kind']}", time_unix_nano=when, attributes=attributes
        )
    return request.SerializeToString()


def openinference_exports(spans: int, batch: int, seed: int = 7) -> tuple[list[bytes], list]:
    """OpenInference LLM spans in exports of `batch` spans, and the raw records the mapping makes
    of each export (records.formats.otlp.map_export), for the native side."""
    import random

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    rng = random.Random(seed)
    tools = [f"tool_{i}" for i in range(30)]
    now = int(time.time() * 1e9)
    bodies, records = [], []
    for first in range(0, spans, batch):
        request = ExportTraceServiceRequest()
        resource = request.resource_spans.add()
        resource.resource.attributes.add(key="service.name", value=AnyValue(string_value="bench"))
        scope = resource.scope_spans.add()
        for n in range(first, min(first + batch, spans)):
            offered = rng.sample(tools, 12)
            called = rng.choice(offered)
            model = rng.choice(("gpt-4o-mini", "gpt-4o", "claude-sonnet-4-5"))
            attributes = {
                "openinference.span.kind": "LLM",
                "llm.provider": "openai",
                "llm.system": "openai",
                "llm.model_name": f"{model}-2025-01-01",
                "llm.invocation_parameters": json.dumps({"model": model, "temperature": 0}),
                "llm.token_count.prompt": rng.randint(200, 4000),
                "llm.token_count.completion": rng.randint(10, 400),
                "llm.token_count.total": 0,
                "llm.input_messages.0.message.role": "system",
                "llm.input_messages.0.message.content": "You are a support agent.",
                "llm.input_messages.1.message.role": "user",
                "llm.input_messages.1.message.content": "Where is my order? " * 4,
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.tool_calls.0.tool_call.id": f"call_{n}",
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": called,
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments":
                    json.dumps({"order": n}),
                "session.id": f"session-{n // 40}",
            }  # fmt: skip
            for i, name in enumerate(offered):
                schema = {"type": "function", "function": {"name": name, "description": "A tool.",
                          "parameters": {"type": "object", "properties": {}}}}  # fmt: skip
                attributes[f"llm.tools.{i}.tool.json_schema"] = json.dumps(schema)
            run = hashlib.sha256(f"run-{n // 4}".encode()).digest()
            span = scope.spans.add(
                trace_id=run[:16],
                span_id=hashlib.sha256(f"span-{n}".encode()).digest()[:8],
                name="ChatCompletion",
                start_time_unix_nano=now - (spans - n) * 1_000_000,
                end_time_unix_nano=now - (spans - n) * 1_000_000 + 800_000,
            )
            for key, value in attributes.items():
                any_value = (AnyValue(int_value=value) if isinstance(value, int)
                             else AnyValue(string_value=value))  # fmt: skip
                span.attributes.append(KeyValue(key=key, value=any_value))
        bodies.append(request.SerializeToString())
        records.append(mapped_records(request))
    return bodies, records


def ai_sdk_exports(spans: int, batch: int, seed: int = 7) -> tuple[list[bytes], list]:
    """AI SDK 6 agent runs (seven spans each, whole runs to an export of about `batch` spans) and
    the raw records the mapping makes of each export, for the native side."""
    import random

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue

    rng = random.Random(seed)
    tools = [json.dumps({"type": "function", "name": f"tool_{i}", "description": "A tool.",
                         "inputSchema": {"type": "object", "properties": {}}})
             for i in range(12)]  # fmt: skip
    now = int(time.time() * 1e9) // 1_000_000 * 1_000_000  # the AI SDK stamps milliseconds
    common = {"ai.telemetry.functionId": "support", "ai.settings.maxRetries": 2,
              "ai.telemetry.metadata.userId": "user-7"}  # fmt: skip

    def add_span(scope, trace_id: bytes, n: int, parent: bytes, name: str, start_ms: int,
                 duration_ms: int, attributes: dict) -> bytes:  # fmt: skip
        span_id = hashlib.sha256(f"ai-sdk-{n}-{name}-{start_ms}".encode()).digest()[:8]
        span = scope.spans.add(
            trace_id=trace_id, span_id=span_id, parent_span_id=parent, name=name,
            start_time_unix_nano=now + start_ms * 1_000_000,
            end_time_unix_nano=now + (start_ms + duration_ms) * 1_000_000 + 371_123,
        )  # fmt: skip
        for key, value in {"ai.operationId": name, **common, **attributes}.items():
            if isinstance(value, list):
                any_value = AnyValue(array_value=ArrayValue(
                    values=[AnyValue(string_value=v) for v in value]))  # fmt: skip
            elif isinstance(value, int):
                any_value = AnyValue(int_value=value)
            else:
                any_value = AnyValue(string_value=value)
            span.attributes.append(KeyValue(key=key, value=any_value))
        return span_id

    bodies, records = [], []
    runs = max(1, spans // 7)
    per_export = max(1, batch // 7)
    for first in range(0, runs, per_export):
        request = ExportTraceServiceRequest()
        resource = request.resource_spans.add()
        resource.resource.attributes.add(key="service.name", value=AnyValue(string_value="bench"))
        scope = resource.scope_spans.add()
        for n in range(first, min(first + per_export, runs)):
            trace_id = hashlib.sha256(f"ai-sdk-run-{n}".encode()).digest()[:16]
            start = (n - runs) * 1000
            model = rng.choice(("gpt-4o-mini", "gpt-4o"))
            outer = {
                "ai.model.provider": "openai.chat",
                "ai.model.id": model,
                "ai.telemetry.metadata.sessionId": f"session-{n // 10}",
                "ai.prompt": json.dumps({"prompt": "Where is my order? " * 8}),
            }
            root = add_span(scope, trace_id, n, b"", "ai.generateText", start, 900, outer)
            for step in range(3):
                called = [] if step == 2 else [rng.randrange(12) for _ in range(2 - step)]
                calls = [
                    {"toolCallId": f"call_{n}_{step}_{i}", "toolName": f"tool_{t}",
                     "input": json.dumps({"order": n})}
                    for i, t in enumerate(called)
                ]  # fmt: skip
                forced = '{"type":"tool","toolName":"tool_3"}' if step == 1 else '{"type":"auto"}'
                attributes = {
                    "ai.model.provider": "openai.chat", "ai.model.id": model,
                    "gen_ai.system": "openai.chat", "gen_ai.request.model": model,
                    "gen_ai.response.model": model, "ai.prompt.tools": tools,
                    "ai.prompt.toolChoice": forced,
                    "ai.prompt.messages": json.dumps([{"role": "user", "content": "Hi " * 40}]),
                    "gen_ai.usage.input_tokens": rng.randint(200, 4000),
                    "gen_ai.usage.output_tokens": rng.randint(10, 400),
                    "ai.usage.cachedInputTokens": 0,
                    "ai.response.finishReason": "tool-calls" if calls else "stop",
                    "ai.telemetry.metadata.sessionId": f"session-{n // 10}",
                }  # fmt: skip
                if calls:
                    attributes["ai.response.toolCalls"] = json.dumps(calls)
                add_span(scope, trace_id, n, root, "ai.generateText.doGenerate",
                         start + step * 300, 250, attributes)  # fmt: skip
                for call in calls:
                    add_span(scope, trace_id, n, root, "ai.toolCall", start + step * 300 + 250,
                             20, {"ai.toolCall.name": call["toolName"],
                                  "ai.toolCall.id": call["toolCallId"],
                                  "ai.toolCall.args": call["input"]})  # fmt: skip
        bodies.append(request.SerializeToString())
        records.append(mapped_records(request))
    return bodies, records


def mapped_records(request) -> list[dict]:
    """The raw records the mapping makes of an export, as an agent would post them."""
    from records.formats.otlp import map_export

    mapped = [m.raw for m in map_export(request).records]
    for raw in mapped:  # RFC 3339 text
        raw["ts"] = raw["ts"].isoformat()
    return mapped


def timed_posts(port: int, key: str, path: str, content_type: str, bodies, clients: int) -> float:
    """The round's seconds: its slowest client's, each timed from its connection open."""
    shares = [(port, key, path, content_type, bodies[i::clients]) for i in range(clients)]
    with CLIENTS.Pool(clients) as pool:
        return max(pool.map_async(post_batches, shares).get(ROUND_SECONDS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=6, help="the paths take turns")
    parser.add_argument("--grpc-threads", type=int, default=8, help="the receiver's threads")
    parser.add_argument(
        "--shape",
        choices=("events", "openinference", "ai_sdk"),
        default="events",
        help="the OTLP spans: decisionboard.<kind> events, OpenInference LLM spans, or AI SDK "
        "agent runs",
    )
    parser.add_argument(
        "--database", default="decisionboard_bench_otlp", help="the scratch database (recreated)"
    )
    args = parser.parse_args()
    exit_on_signals()  # a killed run stops its gunicorn and Celery children

    setup_django(args.database)
    import orjson
    from decisionboard_client import Decisionboard

    from records.demo.generator import generate_records
    from records.models import ApiKey, Project, Record

    keys = {}
    for name in ("native", "otlp", "grpc", "client", "warm-up"):
        keys[name] = ApiKey.issue(Project.objects.create(name=name), ApiKey.Scope.INGEST)[1]
    end = datetime.now(UTC).replace(microsecond=0)
    if args.shape in ("openinference", "ai_sdk"):
        # --records counts spans here: each model call maps to three records.
        shape = openinference_exports if args.shape == "openinference" else ai_sdk_exports
        otlp, chunks = shape(args.records, args.batch)
        records = [record for chunk in chunks for record in chunk]
    else:
        records = list(
            generate_records(
                records=args.records, runs=max(1, args.records // 100), seed=7, end=end
            )
        )
        chunks = [records[i : i + args.batch] for i in range(0, len(records), args.batch)]
        otlp = [otlp_export(chunk) for chunk in chunks]
    native = [orjson.dumps({"records": chunk}) for chunk in chunks]
    print(
        f"{len(records):,} {args.shape} records in {len(chunks):,} batches: "
        f"{sum(map(len, native)) / len(records):.0f} bytes each as JSON, "
        f"{sum(map(len, otlp)) / len(records):.0f} as OTLP protobuf",
        flush=True,
    )

    with gunicorn(args.web_workers) as (port, _), otlp_grpc_receiver(args.grpc_threads) as grpc_at:
        # Each gunicorn worker's first requests import and connect: not part of either rate.
        for _ in range(args.web_workers):
            post_batches((port, keys["warm-up"], "/api/v1/records", "application/json", native[:1]))
            post_batches((port, keys["warm-up"], "/v1/traces", "application/x-protobuf", otlp[:1]))
        timed_exports(grpc_at, keys["warm-up"], otlp[:2], 1)
        # In rounds, alternating which path goes first: on a shared machine the load drifts
        # over tens of seconds, and one path measured after the other would carry the drift.
        rounds: dict[str, list[float]] = {"native": [], "otlp": [], "grpc": []}
        per_round = -(-len(chunks) // args.rounds)
        for r, start in enumerate(range(0, len(chunks), per_round)):
            part = slice(start, start + per_round)
            sends = {
                "native": partial(timed_posts, port, keys["native"], "/api/v1/records",
                                  "application/json", native[part], args.clients),
                "otlp": partial(timed_posts, port, keys["otlp"], "/v1/traces",
                                "application/x-protobuf", otlp[part], args.clients),
                "grpc": partial(timed_exports, grpc_at, keys["grpc"], otlp[part], args.clients),
            }  # fmt: skip
            order = list(sends)
            for name in order[r % 3 :] + order[: r % 3]:
                rounds[name].append(sends[name]())
        native_s, otlp_s = sum(rounds["native"]), sum(rounds["otlp"])
        grpc_s = sum(rounds["grpc"])
        client = Decisionboard(
            f"http://127.0.0.1:{port}", keys["client"], batch_size=args.batch, max_queue=10**7
        )
        inside = 0.0
        start = time.perf_counter()
        for r in records:
            before = time.perf_counter()
            client.record(
                r["kind"],
                r["data"],
                run_id=r["run_id"],
                ts=r["ts"],
                id=r["id"],
                agent=r.get("agent"),
                session_id=r.get("session_id"),
                parent_run_id=r.get("parent_run_id"),
            )
            inside += time.perf_counter() - before
        if not client.flush(timeout=600):
            raise SystemExit(f"the client did not finish: {client.stats()}")
        client_s = time.perf_counter() - start
        client.close()

    for name in ("native", "otlp", "grpc", "client"):
        stored = Record.objects.filter(project__name=name).count()
        if stored != len(records):
            raise SystemExit(f"{name}: stored {stored:,} of {len(records):,}")
    n = len(records)
    native_rate, otlp_rate, client_rate = n / native_s, n / otlp_s, n / client_s
    grpc_rate = n / grpc_s
    print(
        f"posted with {args.clients} client(s) to {args.web_workers} gunicorn workers: native "
        f"{native_s:.1f} s, OTLP/HTTP {otlp_s:.1f} s, OTLP/gRPC {grpc_s:.1f} s (one receiver, "
        f"{args.grpc_threads} threads); the Python client {client_s:.1f} s",
        flush=True,
    )
    print(
        "seconds by round: native "
        + " ".join(f"{s:.2f}" for s in rounds["native"])
        + ", OTLP "
        + " ".join(f"{s:.2f}" for s in rounds["otlp"])
        + ", gRPC "
        + " ".join(f"{s:.2f}" for s in rounds["grpc"]),
        flush=True,
    )
    print(
        f"otlp {otlp_rate:,.0f} rec/s, native {native_rate:,.0f} rec/s, "
        f"ratio {otlp_rate / native_rate:.2f}; client {inside / n * 1e6:.1f} µs/record, "
        f"client {client_rate:,.0f} rec/s, ratio {client_rate / native_rate:.2f}"
    )
    print(
        f"otlp grpc {grpc_rate:,.0f} rec/s, otlp http {otlp_rate:,.0f} rec/s, "
        f"ratio {grpc_rate / otlp_rate:.2f}"
    )
    record_result(
        "otlp",
        {
            "options": vars(args),
            "otlp_rec_s": otlp_rate,
            "native_rec_s": native_rate,
            "otlp_ratio": otlp_rate / native_rate,
            "client_us_per_record": inside / n * 1e6,
            "client_rec_s": client_rate,
            "client_ratio": client_rate / native_rate,
            "grpc_rec_s": grpc_rate,
            "grpc_http_ratio": grpc_rate / otlp_rate,
        },
    )


if __name__ == "__main__":
    main()

"""A small OpenAI-compatible server on the loopback that answers `/v1/chat/completions` from a
script, so that the real `openai` client (and what instruments it) runs end to end in tests.

Each answer of the script is one dict, served in order: `status` (200 by default), `model` (the
response's model; the request's when absent), `tool_calls` [(name, arguments JSON)], `content`.
A status other than 200 answers an OpenAI-style error body. A model named in `down` is
unavailable: every request for it is answered 503, without taking an answer of the script.
A request with `"stream": true` is answered as server-sent events, the completion in chunks (the
text, each tool call, the finish reason, then the usage when `stream_options.include_usage`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Script:
    def __init__(self, answers: list[dict[str, Any]], *, down: tuple[str, ...] = ()):
        self.answers = list(answers)
        self.down = frozenset(down)
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def next(self, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.requests.append(request)
            if request.get("model") in self.down:
                return {"status": 503, "content": f"{request.get('model')} is overloaded"}
            if not self.answers:
                return {"status": 500, "content": "the script has no more answers"}
            return self.answers.pop(0)


def completion(request: dict[str, Any], answer: dict[str, Any], n: int) -> dict[str, Any]:
    calls = [
        {
            "id": f"call_{n}_{i}",
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        for i, (name, arguments) in enumerate(answer.get("tool_calls") or ())
    ]
    message: dict[str, Any] = {"role": "assistant", "content": answer.get("content")}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 1_780_000_000,
        "model": answer.get("model") or request.get("model"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 100 + n,
            "completion_tokens": 10 + n,
            "total_tokens": 110 + 2 * n,
        },
    }


def chunks(request: dict[str, Any], answer: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """The completion of `completion` as the chunks of a streamed answer."""
    whole = completion(request, answer, n)
    message, finish = whole["choices"][0]["message"], whole["choices"][0]["finish_reason"]
    head = {k: whole[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": message["content"] or ""}]
    for i, call in enumerate(message.get("tool_calls") or ()):
        deltas.append({"tool_calls": [{"index": i, **call}]})
    out = [head | {"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    out.append(head | {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if (request.get("stream_options") or {}).get("include_usage"):
        out.append(head | {"choices": [], "usage": whole["usage"]})
    return out


@contextmanager
def openai_stub(script: Script) -> Iterator[str]:
    """Serve `script` for the block; yields the base URL for the client (`.../v1`)."""
    served = [0]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet test output
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            request = json.loads(self.rfile.read(length) or b"{}")
            answer = script.next(request)
            served[0] += 1
            status = answer.get("status", 200)
            if status == 200 and request.get("stream"):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for chunk in chunks(request, answer, served[0]):
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.write(b"data: [DONE]\n\n")
                self.close_connection = True
                return
            if status == 200:
                body = completion(request, answer, served[0])
            else:
                body = {"error": {"message": answer.get("content") or "unavailable",
                                  "type": "server_error", "code": None}}  # fmt: skip
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()

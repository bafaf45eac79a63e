"""The client: a bounded queue the agent's thread writes to, background threads that send.

The agent's thread only builds a small dict and appends it under a lock held for O(1) work; every
encoding, compression and network call happens on a sender thread. Nothing here raises into
the caller: mistakes and failures are counted in `stats()` and logged.

Two senders by default, each on a connection of its own: while one batch is being stored, the
next is already on its way, so that the server's web and database work for one agent overlap.
A second sender starts only with a full batch, so a slow trickle of records is not split in two.
"""

from __future__ import annotations

import atexit
import collections
import gzip as gzip_module
import http.client
import itertools
import json
import logging
import os
import random
import threading
import time
import weakref
from collections.abc import Mapping
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger("decisionboard_client")

# Statuses after which the same batch may succeed later; anything else 4xx is permanent.
_RETRYABLE = frozenset({408, 429, 500, 502, 503, 504})
_PERMANENT = frozenset({400, 401, 403, 404, 405, 413, 415, 422})
_COMPRESS_ABOVE = 1024  # bytes: smaller bodies are sent as they are


class Decisionboard:
    """Send decision records to Decisionboard's `POST /api/v1/records`.

    `Decisionboard(url, key)`; then `record(kind, data, run_id=...)` or one method per kind
    (`tool_choice_pick(...)`, `model_call(...)`, ...). Records are batched by `batch_size`
    records, `max_batch_bytes` and `flush_interval` seconds, and up to `max_in_flight` batches
    are sent at once. When `max_queue` records wait, the oldest is dropped and counted.
    `flush()` waits for what is queued; `close()` flushes and stops the senders, and runs at
    interpreter exit (bounded by `exit_timeout`).

    `release` names what the agent runs as (its version, a prompt hash, a git sha) and is
    stamped on every record, so that Decisionboard can compare one release with another.
    """

    def __init__(
        self,
        url: str,
        key: str,
        *,
        agent: str | None = None,
        session_id: str | None = None,
        release: str | None = None,
        max_queue: int = 10_000,
        batch_size: int = 500,
        max_batch_bytes: int = 1_000_000,
        flush_interval: float = 1.0,
        max_in_flight: int = 2,
        timeout: float = 10.0,
        gzip: bool = True,
        max_backoff: float = 30.0,
        max_retry_after: float = 300.0,
        flush_at_exit: bool = True,
        exit_timeout: float = 5.0,
    ) -> None:
        parts = urlsplit(url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url must be http(s)://host[:port][/prefix], got {url!r}")
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port
        self._path = f"{parts.path}/api/v1/records"
        self._headers = {
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/json",
            "User-Agent": "decisionboard-client/0.2",
        }
        if release is not None and not _valid_release(release):
            # Every record would be refused: say so now rather than lose them all later.
            raise ValueError(
                "release must be a string of 1-200 characters without control characters, "
                f"got {release!r}"
            )
        self.agent = agent
        self.session_id = session_id
        self.release = release
        self._max_queue = max(1, max_queue)
        self._batch_size = max(1, batch_size)
        self._max_batch_bytes = max(1024, max_batch_bytes)
        self._flush_interval = flush_interval
        self._max_in_flight = max(1, max_in_flight)
        self._timeout = timeout
        self._gzip = gzip
        self._max_backoff = max_backoff
        self._max_retry_after = max_retry_after
        self._exit_timeout = exit_timeout

        # A random prefix and a counter: unique ids for about a third of a microsecond each, so
        # that a batch sent twice (a retry after a lost answer) is stored once.
        self._id_prefix = f"dbc-{os.urandom(6).hex()}-"
        self._seq = itertools.count()
        self._queue: collections.deque[dict[str, Any]] = collections.deque()
        self._lock = threading.Lock()
        self._drained = threading.Condition(self._lock)
        self._inflight = 0  # records taken by the senders and not yet settled
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._closed = False
        self._deadline = float("inf")
        self._local = threading.local()  # each sender's connection
        self._stats = {
            "queued": 0,  # accepted by record() (before any drop)
            "sent": 0,  # stored by the server (accepted)
            "duplicates": 0,  # the server had them already
            "rejected": 0,  # refused by the server (invalid), see last_error
            "dropped": 0,  # the queue was full: the oldest went
            "invalid": 0,  # a call that could not be recorded (e.g. data not JSON)
            "lost": 0,  # still unsent when close() gave up, or the server refused the batch
            "retries": 0,
            "batches": 0,
        }
        self.last_error: str | None = None
        self._threads = [
            threading.Thread(target=self._run, name=f"decisionboard-client-{i}", daemon=True)
            for i in range(self._max_in_flight)
        ]
        for thread in self._threads:
            thread.start()
        if flush_at_exit:
            atexit.register(_close_at_exit, weakref.ref(self))

    # --- the agent's side: never blocks on I/O, never raises --------------------------------
    def record(
        self,
        kind: str,
        data: Mapping[str, Any],
        *,
        run_id: str,
        ts: datetime | str | float | None = None,
        id: str | None = None,
        session_id: str | None = None,
        agent: str | None = None,
        parent_run_id: str | None = None,
    ) -> str | None:
        """Queue one record of `kind`; returns its id (None if it could not be queued)."""
        try:
            if self._closed:
                self._count("lost")
                return None
            record_id = id or f"{self._id_prefix}{next(self._seq)}"
            record: dict[str, Any] = {
                "id": record_id,
                "kind": kind,
                "run_id": run_id,
                "ts": time.time() if ts is None else ts,
                "data": data,
            }
            session = session_id or self.session_id
            if session is not None:
                record["session_id"] = session
            name = agent or self.agent
            if name is not None:
                record["agent"] = name
            if parent_run_id is not None:
                record["parent_run_id"] = parent_run_id
            if self.release is not None:
                record["release"] = self.release
            with self._lock:
                if len(self._queue) >= self._max_queue:
                    self._queue.popleft()
                    self._stats["dropped"] += 1
                self._queue.append(record)
                self._stats["queued"] += 1
                full = len(self._queue) >= self._batch_size
            if full:
                self._wake.set()
            return record_id
        except Exception as exc:  # never into the agent's code
            self._count("invalid", f"record({kind!r}) failed: {exc!r}")
            return None

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait up to `timeout` s until everything queued so far is sent (or given up on)."""
        try:
            deadline = time.monotonic() + timeout
            self._wake.set()
            with self._drained:
                while self._queue or self._inflight:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or not any(t.is_alive() for t in self._threads):
                        return False
                    self._drained.wait(min(remaining, 0.05))
                    self._wake.set()
            return True
        except Exception as exc:
            self._count("invalid", f"flush failed: {exc!r}")
            return False

    def close(self, timeout: float = 5.0) -> bool:
        """Flush for up to `timeout` s, then stop the sender; what is still unsent is lost."""
        if self._closed:
            return not self._queue
        try:
            flushed = self.flush(timeout)
            self._closed = True
            self._deadline = time.monotonic()
            self._closing.set()
            self._wake.set()
            joined_by = time.monotonic() + max(1.0, timeout)
            for thread in self._threads:
                thread.join(max(0.0, joined_by - time.monotonic()))
            with self._lock:
                unsent = len(self._queue)
                self._queue.clear()
                self._stats["lost"] += unsent
            return flushed and not unsent
        except Exception as exc:
            self._count("invalid", f"close failed: {exc!r}")
            return False

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {**self._stats, "queue": len(self._queue), "last_error": self.last_error}

    def __enter__(self) -> Decisionboard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the sender threads ------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            self._wake.wait(self._flush_interval)
            self._wake.clear()
            try:
                while self._send_one_batch():
                    if self._closing.is_set() and time.monotonic() > self._deadline + 1.0:
                        break
            except Exception as exc:  # a bug here must not kill the sender
                self._count("invalid", f"sender error: {exc!r}")
                log.exception("decisionboard client: sender error")
            if self._closing.is_set():
                break
        self._disconnect()

    def _send_one_batch(self) -> bool:
        """Take and send one batch; False when there was none to take: the queue was empty, or
        another sender is at work and less than a full batch waits (it comes back for those)."""
        with self._lock:
            waiting = len(self._queue)
            if self._inflight and waiting < self._batch_size:
                waiting = 0
            batch = [self._queue.popleft() for _ in range(min(self._batch_size, waiting))]
            self._inflight += len(batch)
        if not batch:
            with self._drained:
                self._drained.notify_all()
            return False
        try:
            parts, size, rest = [], 2, []
            for i, record in enumerate(batch):
                encoded = self._encode(record)
                if encoded is None:
                    continue
                if parts and size + len(encoded) + 1 > self._max_batch_bytes:
                    rest = batch[i:]
                    break
                parts.append(encoded)
                size += len(encoded) + 1
            if rest:  # over the byte budget: back to the front, in order, for the next batch
                with self._lock:
                    self._queue.extendleft(reversed(rest))
            if parts:
                self._send(parts)
        finally:
            with self._drained:
                self._inflight -= len(batch)
                self._drained.notify_all()
        return True

    def _encode(self, record: dict[str, Any]) -> bytes | None:
        try:
            ts = record["ts"]
            if isinstance(ts, (int, float)):
                record["ts"] = datetime.fromtimestamp(ts, timezone.utc).isoformat()
            elif isinstance(ts, datetime):
                record["ts"] = (ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)).isoformat()
            return json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode()
        except (TypeError, ValueError) as exc:
            self._count("invalid", f"record {record.get('id')} is not JSON: {exc}")
            return None

    def _send(self, parts: list[bytes]) -> None:
        body = b'{"records":[' + b",".join(parts) + b"]}"
        compressed = self._gzip and len(body) > _COMPRESS_ABOVE
        if compressed:
            body = gzip_module.compress(body, compresslevel=1)
        attempt = 0
        while True:
            status, retry_after, payload, error = self._post(body, compressed)
            if status in (200, 207):
                self._settle(len(parts), payload)
                return
            if status == 413 and len(parts) > 1:  # too big for this server: halve and resend
                half = len(parts) // 2
                self._send(parts[:half])
                self._send(parts[half:])
                return
            if status in _PERMANENT or (status is not None and status not in _RETRYABLE):
                self._count("lost", f"HTTP {status}: {payload[:300]!r}", len(parts))
                log.warning("decisionboard client: batch refused with HTTP %s", status)
                return
            self.last_error = error or f"HTTP {status}"
            # "Retry-After: 0" (a window about to reset) still backs off a little.
            delay = retry_after if retry_after else self._backoff(attempt)
            if time.monotonic() + delay > self._deadline:
                self._count("lost", f"gave up at close: {self.last_error}", len(parts))
                return
            self._count("retries")
            self._closing.wait(delay)
            attempt += 1

    def _settle(self, count: int, payload: bytes) -> None:
        try:
            answer = json.loads(payload)
            accepted, duplicates = int(answer["accepted"]), int(answer["duplicates"])
            rejected = answer.get("rejected") or []
        except (ValueError, KeyError, TypeError):
            accepted, duplicates, rejected = count, 0, []
        with self._lock:
            self._stats["sent"] += accepted
            self._stats["duplicates"] += duplicates
            self._stats["rejected"] += len(rejected)
            self._stats["batches"] += 1
            if rejected:
                self.last_error = f"rejected: {json.dumps(rejected[0])[:500]}"
        if rejected:
            log.warning(
                "decisionboard client: %d record(s) rejected, e.g. %s", len(rejected), rejected[0]
            )

    def _backoff(self, attempt: int) -> float:
        base = min(self._max_backoff, 0.25 * (2**attempt))
        return base / 2 + random.random() * base / 2  # jitter, so clients do not march in step

    def _post(self, body: bytes, compressed: bool) -> tuple[int | None, float | None, bytes, str]:
        """One POST: (status, Retry-After seconds, body, error); status None when unreachable."""
        headers = dict(self._headers)
        if compressed:
            headers["Content-Encoding"] = "gzip"
        try:
            conn = self._connection()
            conn.request("POST", self._path, body=body, headers=headers)
            response = conn.getresponse()
            payload = response.read()
            retry_after = _retry_after(response.getheader("Retry-After"), self._max_retry_after)
            if response.getheader("Connection", "").lower() == "close":
                self._disconnect()
            return response.status, retry_after, payload, ""
        except (OSError, http.client.HTTPException) as exc:
            self._disconnect()
            return None, None, b"", f"{type(exc).__name__}: {exc}"

    def _connection(self) -> http.client.HTTPConnection:
        """The calling sender's own connection."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            cls = (
                http.client.HTTPSConnection
                if self._scheme == "https"
                else http.client.HTTPConnection
            )
            conn = self._local.conn = cls(self._host, self._port, timeout=self._timeout)
        return conn

    def _disconnect(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            try:
                conn.close()
            except OSError:
                pass
            self._local.conn = None

    def _count(self, name: str, error: str | None = None, n: int = 1) -> None:
        with self._lock:
            self._stats[name] += n
        if error is not None:
            self.last_error = error
            if name == "invalid":
                log.warning("decisionboard client: %s", error)


def _valid_release(value: object) -> bool:
    """What the server accepts as a release: 1-200 characters, none of them a control
    character (C0, DEL or C1)."""
    return (
        isinstance(value, str)
        and 1 <= len(value) <= 200
        and not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in value)
    )


def _retry_after(value: str | None, cap: float) -> float | None:
    """Retry-After as seconds: a number, or an HTTP date."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return min(max(seconds, 0.0), cap)


def _close_at_exit(ref: weakref.ref) -> None:
    client = ref()
    if client is not None:
        client.close(client._exit_timeout)

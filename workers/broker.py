"""kombu's filesystem transport, with each message made visible only once it is whole.

kombu 5.7 writes a message straight into the queue folder (open, then lock, then write) while
a consumer polling that folder moves and reads any file it finds, without the lock: a message
caught between the open and the write is read empty, the JSON decode fails, the message is lost
and the worker's consumer stops ("Unrecoverable error"). Two processes publishing while a worker
consumes lose about one message in ten (tests/workers/test_broker.py); a worker publishing its own
retries during a database outage stopped within seconds. Here a message is written under a
name the consumer ignores and renamed into place, which is atomic within one folder.

The exchange tables (which queues an exchange routes to, a JSON list in a file of the control
folder) have the same gap: a worker that binds a queue to an exchange whose file does not
exist opens it for writing (creating it empty, or emptying one another process just wrote)
and only then locks it, while another worker starting at the same moment reads that empty file
under its own lock and stops with a JSON decode error (bin/start's two workers, once in a CI
run). Here the file is created without truncation and read and rewritten under the lock, and
an empty one is an empty table.

Used for the embedded default (no REDIS_URL) by CELERY_BROKER_TRANSPORT in config/settings.py.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

# The consumer takes files named "<time>_<uuid>.<queue>.msg"; this suffix hides a partial one.
PARTIAL = ".part"


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        """Put `payload` onto `queue`: write it aside, then rename it into the queue."""
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        try:
            with open(final + PARTIAL, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(final + PARTIAL, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc

    def _queue_bind(self, exchange, routing_key, pattern, queue):
        """Add (routing_key, pattern, queue) to the exchange's table, created if need be."""
        file = self._exchange_file(exchange)
        self.control_folder.mkdir(exist_ok=True)
        binding = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        try:
            _update_table(
                file, os.O_RDWR | os.O_CREAT, lambda t: None if binding in t else [binding, *t]
            )
        except OSError as exc:
            raise ChannelError(f"Cannot open {file}") from exc

    def _delete(self, queue, exchange, routing_key, pattern, *args, **kwargs):
        """Delete `queue` and take its binding out of the exchange's table."""
        super(filesystem.Channel, self)._delete(queue, exchange, routing_key, pattern, *args,
                                                **kwargs)  # fmt: skip
        file = self._exchange_file(exchange)
        binding = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")

        def without(table: list) -> list | None:
            if binding not in table:
                return None
            table.remove(binding)
            return table

        try:
            _update_table(file, os.O_RDWR, without)
        except FileNotFoundError:
            return  # removed meanwhile: nothing to take out

    def get_table(self, exchange):
        """The exchange's table; empty while a binding process has created its file and not
        yet written it."""
        file = self._exchange_file(exchange)
        try:
            with open(file, "rb") as f:
                filesystem.lock(f, filesystem.LOCK_SH)
                try:
                    return _table(f.read())
                finally:
                    filesystem.unlock(f)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ChannelError(f"Cannot open {file}") from exc


def _update_table(file, flags: int, change) -> None:
    """Read the exchange table in `file` (opened with `flags`, never truncated on opening) and
    write back what `change` makes of it (None: unchanged), all under an exclusive lock."""
    with open(os.open(file, flags, 0o644), "r+b", buffering=0) as f:
        filesystem.lock(f, filesystem.LOCK_EX)
        try:
            table = change(_table(f.read()))
            if table is not None:
                f.seek(0)
                f.truncate()
                f.write(str_to_bytes(dumps(table)))
        finally:
            filesystem.unlock(f)


def _table(content: bytes) -> list:
    text = bytes_to_str(content)
    return [filesystem.exchange_queue_t(*q) for q in loads(text)] if text.strip() else []


class Transport(filesystem.Transport):
    Channel = Channel

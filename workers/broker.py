"""kombu's filesystem transport, with each message made visible only once it is whole.

kombu 5.7 writes a message straight into the queue folder (open, then lock, then write) while
a consumer polling that folder moves and reads any file it finds, without the lock: a message
caught between the open and the write is read empty, the JSON decode fails, the message is lost
and the worker's consumer stops ("Unrecoverable error"). Two processes publishing while a worker
consumes lose about one message in ten (tests/test_broker.py); a worker publishing its own
retries during a database outage stopped within seconds. Here a message is written under a
name the consumer ignores and renamed into place, which is atomic within one folder.

Used for the embedded default (no REDIS_URL) by CELERY_BROKER_TRANSPORT in config/settings.py.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

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


class Transport(filesystem.Transport):
    Channel = Channel

"""The Celery queues, named in one place."""

from __future__ import annotations

from enum import StrEnum


class Queue(StrEnum):
    # Short, frequent work that must not wait behind long jobs: heartbeats, catch-up passes.
    DEFAULT = "default"

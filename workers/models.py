from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class Heartbeat(models.Model):
    """The last time beat and a worker ran the heartbeat task on a queue (`name`): is the
    pipeline alive? And when a worker consuming the queue last started, so that a queue with
    no heartbeat since is given a period to get its first one (workers.heartbeat)."""

    name = models.CharField(max_length=100, unique=True)
    last_seen = models.DateTimeField(null=True, blank=True)
    worker_started = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} @ {self.last_seen or 'never'}"


class WorkerHost(models.Model):
    """A worker process (Celery node `worker`, on the machine `host`: DECISIONBOARD_HOSTNAME)
    consuming `queue`, and when it last said it was alive. The worker's main process writes it
    every few seconds (workers.heartbeat.HostPresence), whichever worker beat's heartbeats
    reach, so that /metrics and `manage.py doctor` name every host's workers."""

    host = models.CharField(max_length=200)
    worker = models.CharField(max_length=200)
    queue = models.CharField(max_length=100)
    started_at = models.DateTimeField()
    last_seen = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["worker", "queue"], name="worker_host_worker_queue")
        ]

    def __str__(self) -> str:
        return f"{self.worker} on {self.host}: {self.queue} @ {self.last_seen}"


class ExportJob(models.Model):
    """A filtered export of a project's records written to a file by a worker.

    `filters` keeps the query parameters as given, so the worker parses them with the same
    records.contract.filters code as the API. The file lives under VAR_DIR/exports until
    `expires_at`.
    """

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"
        EXPIRED = "expired"

    class Format(models.TextChoices):
        CSV = "csv"
        JSONL = "jsonl"
        PARQUET = "parquet"

    project = models.ForeignKey("records.Project", on_delete=models.CASCADE, related_name="+")
    format = models.CharField(max_length=10, choices=Format.choices)
    filters = models.JSONField(default=dict)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    # Who asked: an operator from the exports page, or an API key.
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    api_key = models.ForeignKey(
        "records.ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    rows = models.BigIntegerField(default=0)
    # The rows matching when the job started: progress is rows / total_rows.
    total_rows = models.BigIntegerField(null=True, blank=True)
    file_name = models.CharField(max_length=200, blank=True)
    size_bytes = models.BigIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Touched with each progress report: a running job that stops being touched has lost its
    # worker, and the expiry pass marks it failed.
    updated_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["project", "-id"], name="exportjob_recent")]

    def __str__(self) -> str:
        return f"export {self.pk} ({self.format}, {self.status})"

    @property
    def progress(self) -> float:
        """From 0 to 1; 1 once done, whatever the count said at the start."""
        if self.status in (self.Status.DONE, self.Status.EXPIRED):
            return 1.0
        if not self.total_rows:
            return 0.0
        return min(1.0, self.rows / self.total_rows)

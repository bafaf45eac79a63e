"""Export jobs: run one in a worker, and expire old files (workers.export_requests starts them).

The rows and file formats come from records.formats.record_export; this module keeps the
ExportJob up to date (status, rows written, progress) and the files under VAR_DIR/exports.
Plain functions: the Celery tasks in workers.tasks call them with ids.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path

from django.conf import settings
from django.db import router
from django.utils import timezone

from config.replicas import reading_replica
from records.contract.filters import filter_records, parse_filters
from records.formats.record_export import (
    FORMATS,
    counting,
    export_chunks,
    export_rows_paged,
)
from records.models import Record
from workers.models import ExportJob

log = logging.getLogger(__name__)

# A running job reports progress every PROGRESS_EVERY rows; one silent for STALE_AFTER has lost
# its worker (killed, restarted) and is marked failed so that nobody waits on it forever.
PROGRESS_EVERY = 10_000
STALE_AFTER = timedelta(minutes=30)
# A queued job no worker took within this is failed too (the broker lost it, no worker runs).
QUEUED_TOO_LONG = timedelta(hours=6)


def export_dir() -> Path:
    path = Path(settings.VAR_DIR) / "exports"
    path.mkdir(parents=True, exist_ok=True)
    return path


def file_path(job: ExportJob) -> Path:
    return export_dir() / job.file_name


def run_export(job_id: int) -> ExportJob | None:
    """Write the job's file; a job that is not queued (done, or taken by another worker) is left."""
    now = timezone.now()
    claimed = ExportJob.objects.filter(pk=job_id, status=ExportJob.Status.QUEUED).update(
        status=ExportJob.Status.RUNNING, started_at=now, updated_at=now
    )
    if not claimed:
        log.info("export %s is not queued; nothing to do", job_id)
        return None
    job = ExportJob.objects.select_related("project").get(pk=job_id)
    job.file_name = f"export-{job.pk}.{FORMATS[job.format].extension}"
    path = file_path(job)
    part = path.with_name(path.name + ".part")
    try:
        # The rows from a replica when one is fit (config.replicas); the job's progress and
        # status are written to the primary.
        with reading_replica():
            alias = router.db_for_read(Record)
        queryset = filter_records(
            Record.objects.using(alias).filter(project=job.project), parse_filters(job.filters)
        )
        job.total_rows = queryset.count()
        job.save(update_fields=["file_name", "total_rows"])
        rows = counting(export_rows_paged(queryset), PROGRESS_EVERY, partial(_report, job.pk))
        with open(part, "wb") as out:
            for chunk in export_chunks(job.format, rows):
                out.write(chunk)
        part.replace(path)
    except Exception as exc:
        log.exception("export %s failed", job_id)
        part.unlink(missing_ok=True)
        _finish(job, ExportJob.Status.FAILED, error=f"{type(exc).__name__}: {exc}")
        return job
    job.refresh_from_db(fields=["rows"])
    job.size_bytes = path.stat().st_size
    _finish(job, ExportJob.Status.DONE, expires_at=timezone.now() + _ttl())
    return job


def _report(job_id: int, rows: int) -> None:
    ExportJob.objects.filter(pk=job_id).update(rows=rows, updated_at=timezone.now())


def _finish(job: ExportJob, status: str, **fields) -> None:
    job.status = status
    job.finished_at = job.updated_at = timezone.now()
    for name, value in fields.items():
        setattr(job, name, value)
    job.save()


def expire_exports(now: datetime | None = None) -> int:
    """Delete files past their expiry, fail jobs whose worker vanished; returns files removed."""
    now = now or timezone.now()
    removed = 0
    for job in ExportJob.objects.filter(status=ExportJob.Status.DONE, expires_at__lte=now):
        if job.file_name:
            try:
                file_path(job).unlink()
                removed += 1
            except FileNotFoundError:
                pass
        job.status = ExportJob.Status.EXPIRED
        job.save(update_fields=["status"])
    ExportJob.objects.filter(
        status=ExportJob.Status.RUNNING, updated_at__lt=now - STALE_AFTER
    ).update(
        status=ExportJob.Status.FAILED,
        error="The worker stopped before the export finished; start it again.",
        finished_at=now,
    )
    ExportJob.objects.filter(
        status=ExportJob.Status.QUEUED, created_at__lt=now - QUEUED_TOO_LONG
    ).update(
        status=ExportJob.Status.FAILED,
        error="No worker took the export; check that a Celery worker consumes the exports queue.",
        finished_at=now,
    )
    # Partial files of jobs that failed without cleaning up (a killed worker).
    running = {
        f"{name}.part"
        for name in ExportJob.objects.filter(status=ExportJob.Status.RUNNING).values_list(
            "file_name", flat=True
        )
    }
    for part in export_dir().glob("*.part"):
        if part.name not in running and part.stat().st_mtime < (now - STALE_AFTER).timestamp():
            part.unlink(missing_ok=True)
            removed += 1
    return removed


def _ttl() -> timedelta:
    """How long a finished export stays downloadable: DECISIONBOARD_EXPORT_TTL_HOURS (24 hours
    unless set; config.settings). Its file goes at the next expire-exports beat tick after."""
    return timedelta(hours=settings.DECISIONBOARD["EXPORT_TTL_HOURS"])

"""Start an export job: validate the request, create the job and hand it to the workers.

Apart from workers.export_jobs, which the workers' task runs, so that the module the task
imports never imports the task back.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial

from django.db import transaction
from django.utils import timezone

from records.contract.filters import PARAMS, parse_filters
from records.formats.record_export import parse_format
from records.models import ApiKey, Project
from workers.models import ExportJob
from workers.tasks import export_task

log = logging.getLogger(__name__)


def start_export(
    project: Project,
    fmt: str | None,
    params: Mapping[str, str],
    *,
    user=None,
    api_key: ApiKey | None = None,
) -> ExportJob:
    """Validate, create the job and enqueue it once the job is committed.

    Raises FilterError naming the parameter (`format` included) when a value is malformed.
    """
    fmt = parse_format(fmt)
    filters = {name: params[name] for name in PARAMS if params.get(name)}
    parse_filters(filters)  # the worker parses them again; refuse a bad value now
    job = ExportJob.objects.create(
        project=project, format=fmt, filters=filters, created_by=user, api_key=api_key
    )
    transaction.on_commit(partial(enqueue, job.pk))
    return job


def enqueue(job_id: int) -> bool:
    try:
        export_task.apply_async((job_id,), retry=False)
    except Exception as exc:  # the broker's own errors: fail the job now, not in six hours
        log.warning("could not enqueue export %s (%s)", job_id, exc)
        ExportJob.objects.filter(pk=job_id, status=ExportJob.Status.QUEUED).update(
            status=ExportJob.Status.FAILED,
            error=f"The workers could not be reached ({exc}); try again, or stream the export "
            "with GET /api/v1/export.",
            finished_at=timezone.now(),
        )
        return False
    return True

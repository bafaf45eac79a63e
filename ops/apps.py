from __future__ import annotations

import time

from django.apps import AppConfig


class OpsConfig(AppConfig):
    """Operating it: /metrics, /healthz, /readyz, request timing and `manage.py doctor`."""

    name = "ops"
    verbose_name = "Operations"

    def ready(self) -> None:
        from celery.signals import task_postrun, task_prerun, worker_process_shutdown

        from ops import instruments, multiprocess

        started: dict[str, float] = {}

        # Every Celery task is timed by name and final state: a catch-up, an alert tick, a
        # delivery, an export (ops.instruments.TASK_SECONDS), with no code in the tasks.
        @task_prerun.connect(weak=False)
        def _task_started(task_id=None, **_kwargs) -> None:
            started[task_id] = time.perf_counter()

        @task_postrun.connect(weak=False)
        def _task_finished(task_id=None, task=None, state=None, **_kwargs) -> None:
            began = started.pop(task_id, None)
            if began is not None and task is not None:
                instruments.observe_task(task.name, state or "unknown", time.perf_counter() - began)

        # A pool process that exits (max_memory_per_child) folds its counts into the archive;
        # a failure is logged and the exit goes on.
        @worker_process_shutdown.connect(weak=False)
        def _pool_process_exits(pid=None, **_kwargs) -> None:
            multiprocess.fold_exited(pid)

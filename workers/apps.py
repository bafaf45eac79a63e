from __future__ import annotations

from django.apps import AppConfig


class WorkersConfig(AppConfig):
    name = "workers"
    verbose_name = "Background workers"

    def ready(self) -> None:
        from celery.signals import task_postrun, task_prerun, worker_process_init, worker_ready

        from workers import connections, memory

        # Database connections kept from task to task, under Django's rules (workers.connections).
        task_prerun.connect(connections.before_task, weak=False)
        task_postrun.connect(connections.after_task, weak=False)

        # A pool process keeps the resident size of its largest task otherwise (workers.memory);
        # worker_max_memory_per_child then replaces one whose size after the task is still past
        # its bound (its peak forgotten: billiard checks ru_maxrss after this signal).
        @task_postrun.connect(weak=False)
        def _task_finished(**_kwargs) -> None:
            memory.give_back_freed_memory()
            memory.forget_peak_memory()

        # A pool process starts with what its parent imported (Django, Celery, the tasks): out
        # of every full collection's walk from the start (ops/heap.py).
        @worker_process_init.connect(weak=False)
        def _pool_process_started(**_kwargs) -> None:
            from ops.heap import freeze_startup_objects

            freeze_startup_objects()

        # The worker is consuming: record when it started on its queues (workers.heartbeat),
        # so that the time before beat's first heartbeat reaches it reads as starting.
        @worker_ready.connect(weak=False)
        def _worker_ready(sender, **_kwargs) -> None:
            from workers.heartbeat import record_worker_start, start_presence

            queues = [q.name for q in sender.task_consumer.queues]
            record_worker_start(queues)
            # Which host's workers are alive (several hosts share the database and Redis).
            start_presence(sender.hostname, queues)

from __future__ import annotations

# Before anything imports prometheus_client, which picks its per-process storage on import:
# every process of the product (gunicorn's, Celery's, commands) counts into this machine's
# metrics folder, and /metrics sums them (ops.multiprocess).
from config.metrics_folder import configure as _configure_metrics

_configure_metrics()

# Load the Celery app whenever Django starts so that @shared_task binds to it.
from config.celery import app as celery_app  # noqa: E402

__all__ = ["celery_app"]

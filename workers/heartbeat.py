from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from workers.models import Heartbeat

WORKER = "worker"


def beat(name: str = WORKER, now: datetime | None = None) -> datetime:
    now = now or timezone.now()
    Heartbeat.objects.update_or_create(name=name, defaults={"last_seen": now})
    return now


def last_seen(name: str = WORKER) -> datetime | None:
    return Heartbeat.objects.filter(name=name).values_list("last_seen", flat=True).first()

from __future__ import annotations

from django.db import models


class Heartbeat(models.Model):
    """The last time beat and a worker ran the heartbeat task: is the pipeline alive?"""

    name = models.CharField(max_length=100, unique=True)
    last_seen = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} @ {self.last_seen:%H:%M:%S}"

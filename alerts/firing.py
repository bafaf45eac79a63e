"""What is firing right now, for the overview page."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Case, When

from alerts.evaluate import CRITICAL, FIRING, NODATA
from alerts.models import AlertState


def firing_alerts(project_ids: Iterable[int], limit: int = 50) -> list[AlertState]:
    """Firing and no-data groups of active rules: critical first, then the longest-running."""
    return list(
        AlertState.objects.filter(
            rule__project_id__in=list(project_ids),
            rule__paused=False,
            state__in=(FIRING, NODATA),
        )
        .select_related("rule", "rule__project")
        .order_by(
            Case(When(state=FIRING, then=0), default=1),
            Case(When(severity=CRITICAL, then=0), default=1),
            "since",
            "id",
        )[:limit]
    )

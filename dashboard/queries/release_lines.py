"""The deploy markers a chart page draws: the project's release markers in the page's period,
for its agent filter. One query a page, on the (project, time) index, whatever the number of
charts on it (each takes the same list)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from records.models import ReleaseMarker

# Markers a page draws at most: past that the lines would hide the data (the earliest kept).
MAX_LINES = 50


@dataclass(frozen=True, slots=True)
class ReleaseLine:
    id: int
    time: datetime
    agent: str  # "" for records that name no agent
    name: str


def release_lines(
    project_id: int, start: datetime, end: datetime, agents: list[str]
) -> list[ReleaseLine]:
    """The markers with start <= time < end, of `agents` (every agent when empty), by time."""
    markers = ReleaseMarker.objects.filter(project_id=project_id, time__gte=start, time__lt=end)
    if agents:
        markers = markers.filter(agent__in=agents)
    rows = markers.order_by("time", "id").values_list("id", "time", "agent", "name")[:MAX_LINES]
    return [ReleaseLine(*row) for row in rows]


def marker_release(project_id: int, marker_id: int) -> tuple[str, str] | None:
    """The (agent, release name) of a project's marker, None when it has no such marker."""
    return (
        ReleaseMarker.objects.filter(project_id=project_id, pk=marker_id)
        .values_list("agent", "name")
        .first()
    )

"""When a release of an agent began: a deploy marker, drawn on every time chart.

A marker is made by `POST /api/v1/releases` (a deploy script names the release it ships), or by
the catch-up when it folds the first record of a release nobody marked (records.catchup's
marker_fold). The pages read them by (project, time); the catch-up and the API write them by
(project, agent, name), which is unique.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from records.models.tenancy import Project

MAX_DESCRIPTION_CHARS = 2000
MAX_LINK_CHARS = 2000


def validate_marker_link(value: str) -> None:
    """A link an operator may follow from a chart: http(s) with a host, nothing else (a
    `javascript:` or `data:` URL would run in the page that draws it)."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValidationError("must be an http:// or https:// URL")


class ReleaseMarker(models.Model):
    """The start of release `name` of `agent` ("" for records that name no agent) in a
    project. `time` is when it began: the time posted (now when left out), or the earliest
    record of the release folded so far, for a marker the catch-up made (it moves earlier when
    an earlier record of the release arrives late; a posted marker's time never moves)."""

    class Source(models.TextChoices):
        API = "api", "api"
        FIRST_RECORD = "first record", "first record"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="release_markers")
    agent = models.CharField(max_length=200, blank=True, default="")
    name = models.CharField(max_length=200)
    time = models.DateTimeField(default=timezone.now)
    description = models.TextField(max_length=MAX_DESCRIPTION_CHARS, blank=True, default="")
    # http(s) only: validate_marker_link, checked where a marker is posted (api.release_markers).
    link = models.CharField(max_length=MAX_LINK_CHARS, blank=True, default="")
    source = models.CharField(max_length=20, choices=Source.choices, default=Source.API)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "agent", "name"], name="release_marker_unique"
            )
        ]
        # The charts' one query a page: the project's markers in the page's range.
        indexes = [models.Index(fields=["project", "time"], name="release_marker_time")]

    def __str__(self) -> str:
        who = f"{self.agent} " if self.agent else ""
        return f"{who}{self.name} from {self.time:%Y-%m-%d %H:%M}"

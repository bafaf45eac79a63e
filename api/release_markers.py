"""/api/v1/releases: deploy markers (docs/api.md, "Releases").

POST marks a release of an agent, with an ingest key as records are posted (a deploy script
holds one): 201 with the new marker, or 200 when the agent's release was marked already, its
description and link then replaced by those posted. GET lists the project's markers with a
read key or an operator's session, newest first, keyset paged, filtered by agent. The catch-up
marks a release on its own when it folds its first record (records.catchup's marker_fold).
"""

from __future__ import annotations

import re
from datetime import datetime

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import AuthenticationFailed, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from api.access import project_for_request
from api.auth import CanIngest
from api.bodies import RejectUnknownFields
from api.metrics import ReadView
from api.pagination import LIMIT_PARAMETER, Keyset, page_response
from api.read import PROJECT_PARAMETER, page_schema
from api.throttles import KeyRateThrottle
from records.contract.schema import RELEASE_PATTERN
from records.models import (
    MAX_DESCRIPTION_CHARS,
    MAX_LINK_CHARS,
    Project,
    ReleaseMarker,
    validate_marker_link,
)

MARKER_KEYSET = Keyset((("time", datetime), ("id", int)), descending=True)
_RELEASE = re.compile(RELEASE_PATTERN)
# The agents a list may name at once.
MAX_AGENTS = 100


class OffsetDateTimeField(serializers.DateTimeField):
    """RFC 3339 with an offset, as a record's `ts`: a time without one would be read in the
    server's zone, which the caller cannot know."""

    def to_internal_value(self, value):
        if isinstance(value, str) and not re.search(r"(Z|z|[+-]\d\d:?\d\d)$", value.strip()):
            raise ValidationError("must be RFC 3339 with an offset (Z or +hh:mm)")
        try:
            return super().to_internal_value(value)
        except OverflowError:
            raise ValidationError("is out of range") from None


class ReleaseMarkerSerializer(RejectUnknownFields, serializers.ModelSerializer):
    project = serializers.CharField(source="project.name", read_only=True)
    name = serializers.CharField(
        max_length=200, help_text="The release, as the records name it (1-200 characters)."
    )
    agent = serializers.CharField(max_length=200, help_text="The agent that runs the release.")
    time = OffsetDateTimeField(
        required=False, help_text="When the release began (RFC 3339 with an offset); now when "
        "left out."
    )  # fmt: skip
    description = serializers.CharField(
        required=False, allow_blank=True, max_length=MAX_DESCRIPTION_CHARS,
        help_text=f"What changed, at most {MAX_DESCRIPTION_CHARS:,} characters.",
    )  # fmt: skip
    link = serializers.CharField(
        required=False, allow_blank=True, max_length=MAX_LINK_CHARS,
        help_text="An http(s) URL: the deploy, the pull request, the release notes.",
    )  # fmt: skip

    class Meta:
        model = ReleaseMarker
        fields = [
            "id",
            "project",
            "agent",
            "name",
            "time",
            "description",
            "link",
            "source",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["source", "created_at", "updated_at"]
        # (project, agent, name) is unique, but a repeat is an update here, not an error.
        validators: list = []

    def validate_name(self, value: str) -> str:
        if not _RELEASE.match(value):
            raise ValidationError("must not hold control characters")
        return value

    def validate_agent(self, value: str) -> str:
        if not _RELEASE.match(value):
            raise ValidationError("must not hold control characters")
        return value

    def validate_link(self, value: str) -> str:
        if value:
            try:
                validate_marker_link(value)
            except DjangoValidationError as exc:
                raise ValidationError(exc.messages) from None
        return value


def mark_release(project: Project, fields: dict) -> tuple[ReleaseMarker, bool]:
    """The marker of (project, agent, name), made from `fields` or, when it exists, given the
    posted description and link; True when made. A marker the catch-up made keeps its time."""
    key = {"project": project, "agent": fields["agent"], "name": fields["name"]}
    changes = {name: fields[name] for name in ("description", "link") if name in fields}
    try:
        with transaction.atomic():
            marker = ReleaseMarker.objects.create(
                **key,
                time=fields.get("time") or timezone.now(),
                source=ReleaseMarker.Source.API,
                **changes,
            )
            return marker, True
    except IntegrityError:  # marked already (by an earlier post, or by its first record)
        pass
    with transaction.atomic():
        marker = ReleaseMarker.objects.select_for_update().get(**key)
        for name, value in changes.items():
            setattr(marker, name, value)
        marker.updated_at = timezone.now()
        marker.save(update_fields=[*changes, "updated_at"])
    return marker, False


def agents_of(params) -> list[str]:
    raw = params.get("agent")
    if not raw:
        return []
    agents = [a for a in raw.split(",") if a]
    if len(agents) > MAX_AGENTS:
        raise ValidationError({"agent": [f"at most {MAX_AGENTS} agents"]})
    if any("\x00" in a for a in agents):
        raise ValidationError({"agent": ["must not hold NUL"]})
    return agents


class ReleaseMarkersView(APIView):
    """POST with an ingest key (as records are posted), GET as every read: one path, each
    method with its own authentication, as /api/v1/records has."""

    permission_classes = [CanIngest]
    throttle_classes = [KeyRateThrottle]

    def _reading(self) -> bool:
        request = getattr(self, "request", None)
        return request is not None and request.method in ("GET", "HEAD", "OPTIONS")

    def get_authenticators(self):
        if self._reading():
            return [auth() for auth in ReadView.authentication_classes]
        return super().get_authenticators()

    def get_permissions(self):
        if self._reading():
            return [permission() for permission in ReadView.permission_classes]
        return super().get_permissions()

    def get_throttles(self):
        return super().get_throttles() if not self._reading() else []

    @extend_schema(
        operation_id="releases_create",
        summary="Mark a release of an agent",
        description="A deploy marker: `name` (the release, as records name it) of `agent` "
        "began at `time` (now when left out). A repeat of the agent's release answers 200 and "
        "replaces its description and link; its time stays. Takes an ingest key.",
        request=ReleaseMarkerSerializer,
        responses={201: ReleaseMarkerSerializer, 200: ReleaseMarkerSerializer},
    )
    def post(self, request):
        project = request.auth.project
        serializer = ReleaseMarkerSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            marker, made = mark_release(project, serializer.validated_data)
        except ReleaseMarker.DoesNotExist:  # the project went since its key was read
            raise AuthenticationFailed("Unknown or revoked API key.") from None
        return Response(
            ReleaseMarkerSerializer(marker).data,
            status=status.HTTP_201_CREATED if made else status.HTTP_200_OK,
        )

    @extend_schema(
        operation_id="releases_list",
        summary="List release markers, newest first",
        description="The project's deploy markers by time, newest first: posted ones "
        '(`source` "api") and those of releases first seen in a record (`source` '
        '"first record", at that record\'s time).',
        parameters=[
            OpenApiParameter("agent", str, description="Comma list of agents (any of)."),
            PROJECT_PARAMETER,
            OpenApiParameter("cursor", str, description="The `next` link's cursor."),
            LIMIT_PARAMETER,
        ],
        responses={200: page_schema("ReleaseMarkerPage", ReleaseMarkerSerializer)},
    )
    def get(self, request):
        project = project_for_request(request)
        markers = ReleaseMarker.objects.filter(project=project).select_related("project")
        agents = agents_of(request.query_params)
        if agents:
            markers = markers.filter(agent__in=agents)
        return page_response(request, markers, MARKER_KEYSET, ReleaseMarkerSerializer)

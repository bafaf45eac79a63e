"""/api/v1/alert-rules (CRUD) and /api/v1/alert-events (history): docs/api.md, "Alerts API".

Same rights as the rest of the read API: a read key or an operator's session reads; changing
rules takes a key with the `all` scope or an editor or admin of the project (config.roles). A
rule of another project is a 404, never a 403. Lists use the API's keyset pagination.
"""

from __future__ import annotations

from datetime import datetime

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.db.models import QuerySet
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import SAFE_METHODS
from rest_framework.response import Response

from alerts.evaluate import STATES
from alerts.models import (
    AlertEvent,
    AlertState,
    Channel,
    Notification,
    Rule,
    filter_events,
    rule_errors,
)
from api.access import CanRead, RoleRequired, project_for_request
from api.bodies import RejectUnknownFields
from api.metrics import ReadView
from api.pagination import LIMIT_PARAMETER, Keyset, KeysetPagination, page_response
from api.read import PROJECT_PARAMETER
from records.models import ApiKey, Project
from records.store import audit_trail

EVENT_KEYSET = Keyset((("id", int),), descending=True)


class CanManageAlerts(CanRead):
    """Reads as CanRead; writes need the `all` scope, or a session (scoped by the queryset, its
    role checked by config.roles.RoleRequired)."""

    write_message = "Changing alert rules needs an API key with the `all` scope."

    def has_permission(self, request, view) -> bool:
        if not super().has_permission(request, view):
            return False
        if request.method in SAFE_METHODS or not isinstance(request.auth, ApiKey):
            return True
        self.message = self.write_message
        return request.auth.scope == ApiKey.Scope.ALL


def accessible_projects(request):
    if isinstance(request.auth, ApiKey):
        return [request.auth.project_id]
    return Project.objects.for_user(request.user).values("id")


class AlertStateSerializer(serializers.ModelSerializer):
    class Meta:
        model = AlertState
        fields = [
            "group",
            "state",
            "severity",
            "value",
            "count",
            "since",
            "notified_at",
            "updated_at",
        ]


def value_after_write(serializer: serializers.Serializer, attrs: dict, name: str):
    """A field's value once a create or a (partial) update is saved: the posted one, else the
    stored one (None on create)."""
    if name in attrs:
        return attrs[name]
    return getattr(serializer.instance, name) if serializer.instance else None


class AlertRuleSerializer(RejectUnknownFields, serializers.ModelSerializer):
    project = serializers.CharField(source="project.name", read_only=True)
    channels = serializers.PrimaryKeyRelatedField(
        many=True, queryset=Channel.objects.all(), required=False
    )
    states = AlertStateSerializer(many=True, read_only=True)
    silenced = serializers.SerializerMethodField()

    class Meta:
        model = Rule
        fields = [
            "id",
            "project",
            "name",
            *Rule.CONDITION_FIELDS,
            *Rule.FIRING_FIELDS,
            "channels",
            "paused",
            "silenced_until",
            "silenced",
            "states",
            "last_evaluated_at",
            "last_error",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["last_evaluated_at", "last_error", "created_at", "updated_at"]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        project = self.context.get("project")
        if project is not None:
            # Another project's channel id reads as one that does not exist.
            self.fields["channels"].child_relation.queryset = Channel.objects.filter(
                project=project
            )

    def get_silenced(self, rule: Rule) -> bool:
        return rule.is_silenced()

    def validate_channels(self, channels: list[Channel]) -> list[Channel]:
        project_id = self.context["project"].pk
        if any(channel.project_id != project_id for channel in channels):
            raise ValidationError("no such channel in this project")
        return channels

    def validate(self, attrs: dict) -> dict:
        values = {name: value_after_write(self, attrs, name) for name in Rule.CONDITION_FIELDS}
        values = {k: v for k, v in values.items() if v is not None or k == "warning_threshold"}
        errors = rule_errors(**values)
        if errors:
            raise ValidationError(errors)
        return attrs


class PageListSchema(AutoSchema):
    """A ProjectItemViewSet's list answers one page object (`{"results", "next"}`), which
    drf-spectacular would document as an array of them, as it does for every `list` action."""

    def _is_list_view(self, serializer=None) -> bool:
        if getattr(self.view, "action", None) == "list":
            return False
        return super()._is_list_view(serializer)


class ProjectItemViewSet(viewsets.ModelViewSet):
    """CRUD on alert rules or channels, which belong to a project.

    A list is one project's (api.access.project_for_request); an item is addressed by id in
    whichever of the caller's projects it belongs to (another project's is a 404); a new item
    is made in the request's project. Lists page by id (api.pagination).
    """

    authentication_classes = ReadView.authentication_classes
    permission_classes = [CanManageAlerts, RoleRequired]
    pagination_class = KeysetPagination  # by id
    schema = PageListSchema()

    def items(self) -> QuerySet:
        raise NotImplementedError

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # drf-spectacular has no real request
            return self.items().none()
        if self.action == "list":
            return self.items().filter(project=project_for_request(self.request))
        return self.items().filter(project_id__in=accessible_projects(self.request))

    def get_serializer_context(self) -> dict:
        context = super().get_serializer_context()
        if getattr(self, "swagger_fake_view", False):
            return context
        if self.action == "create":
            context["project"] = project_for_request(self.request)
        elif self.action in ("update", "partial_update"):
            context["project"] = self.get_object().project
        return context

    # Each change is one transaction with its audit entry (records.store.audit_trail).
    def perform_create(self, serializer) -> None:
        with transaction.atomic():
            item = serializer.save(project=serializer.context["project"])
            audit_trail.record_change(
                "create", item, actor=audit_trail.actor_of(self.request), before=None
            )

    def perform_update(self, serializer) -> None:
        with transaction.atomic():
            before = audit_trail.snapshot(serializer.instance)
            item = serializer.save()
            audit_trail.record_change(
                "update", item, actor=audit_trail.actor_of(self.request), before=before
            )

    def perform_destroy(self, instance) -> None:
        with transaction.atomic():
            audit_trail.record_deletion(instance, actor=audit_trail.actor_of(self.request))
            instance.delete()


def list_schema(summary: str, name: str, serializer: type, operation_id: str) -> dict:
    """The OpenAPI description of a ProjectItemViewSet's list (extend_schema_view)."""
    return {
        "list": extend_schema(
            operation_id=operation_id,
            summary=summary,
            parameters=[
                PROJECT_PARAMETER,
                OpenApiParameter("cursor", str, description="The `next` link's cursor."),
                LIMIT_PARAMETER,
            ],
            responses={
                200: inline_serializer(
                    name,
                    {
                        "results": serializer(many=True),
                        "next": serializers.URLField(allow_null=True),
                    },
                )
            },
        )
    }


@extend_schema_view(
    **list_schema(
        "List the project's alert rules with each group's state", "AlertRulePage",
        AlertRuleSerializer, "alert_rules_list",
    )
)  # fmt: skip
class AlertRuleViewSet(ProjectItemViewSet):
    serializer_class = AlertRuleSerializer

    def items(self) -> QuerySet:
        return Rule.objects.select_related("project").prefetch_related("channels", "states")


# A channel's fields the caller cannot set: made by the model (secret) or kept by the workers.
_CHANNEL_KEPT = [
    "secret",
    "disabled",
    "consecutive_failures",
    "last_error",
    "last_attempt_at",
    "created_at",
]


@extend_schema_field(
    {"type": "string", "maxLength": 2000, "anyOf": [{"format": "uri"}, {"maxLength": 0}]}
)
class WebhookURLField(serializers.URLField):
    """A webhook's URL; blank on an email channel (documented so: a URL or empty)."""


class AlertChannelSerializer(RejectUnknownFields, serializers.ModelSerializer):
    """A webhook or email channel. The webhook secret is shown to callers who may change alert
    rules (sessions, keys with the `all` scope), so that a receiver can check signatures."""

    project = serializers.CharField(source="project.name", read_only=True)
    url = WebhookURLField(
        max_length=2000,
        required=False,
        allow_blank=True,
        help_text="Webhook: the URL to POST to (empty on an email channel).",
    )
    addresses = serializers.ListField(
        child=serializers.EmailField(), required=False, help_text="Email: the recipients."
    )

    class Meta:
        model = Channel
        fields = ["id", "project", "name", "kind", "url", "addresses", *_CHANNEL_KEPT]
        read_only_fields = _CHANNEL_KEPT

    def to_representation(self, channel: Channel) -> dict:
        data = super().to_representation(channel)
        if not self.context.get("show_secret"):
            data.pop("secret")
        return data

    def validate(self, attrs: dict) -> dict:
        # The model's own checks (a webhook needs a URL that is not private, an email channel an
        # address), on the channel as it would be saved.
        channel = Channel(project=self.context["project"])
        if self.instance is not None:
            channel = Channel(**{f.attname: getattr(self.instance, f.attname)
                                 for f in Channel._meta.concrete_fields})  # fmt: skip
        for name, value in attrs.items():
            setattr(channel, name, value)
        try:
            channel.clean()
        except DjangoValidationError as exc:
            raise ValidationError(exc.message_dict) from None
        return attrs


@extend_schema_view(
    **list_schema(
        "List the project's alert channels",
        "AlertChannelPage",
        AlertChannelSerializer,
        "alert_channels_list",
    )
)
class AlertChannelViewSet(ProjectItemViewSet):
    serializer_class = AlertChannelSerializer

    def items(self) -> QuerySet:
        return Channel.objects.select_related("project")

    def get_serializer_context(self) -> dict:
        context = super().get_serializer_context()
        auth = getattr(self.request, "auth", None)
        context["show_secret"] = not isinstance(auth, ApiKey) or auth.scope == ApiKey.Scope.ALL
        return context

    @extend_schema(
        summary="Enable a channel the workers disabled after repeated failures",
        request=None,
        responses={200: AlertChannelSerializer},
    )
    @action(detail=True, methods=["post"])
    def enable(self, request, pk=None):
        channel = self.get_object()
        with transaction.atomic():
            before = audit_trail.snapshot(channel)
            channel.enable()
            audit_trail.record_change(
                "update", channel, actor=audit_trail.actor_of(request), before=before
            )
        return Response(self.get_serializer(channel).data)


class NotificationSerializer(serializers.ModelSerializer):
    channel = serializers.CharField(source="channel.name")

    class Meta:
        model = Notification
        fields = ["channel", "status", "attempts", "last_error"]


class AlertEventSerializer(serializers.ModelSerializer):
    rule_name = serializers.CharField(source="rule.name")
    # Plain strings: the states are documented once, on AlertStateSerializer.state.
    from_state = serializers.CharField()
    to_state = serializers.CharField()
    notifications = NotificationSerializer(many=True)

    class Meta:
        model = AlertEvent
        fields = [
            "id",
            "rule",
            "rule_name",
            *AlertEvent.FACTS,
            "notifications",
        ]


class AlertEventListView(ReadView):
    @extend_schema(
        operation_id="alert_events_list",
        summary="Alert events, newest first",
        parameters=[
            OpenApiParameter("rule", int, description="One rule's events."),
            OpenApiParameter("group", str, description="One group (a model or an agent)."),
            OpenApiParameter("state", str, description=f"The state entered: {STATES}."),
            OpenApiParameter("reason", str, description="transition, renotify or severity."),
            OpenApiParameter("from", datetime, description="Inclusive start (RFC 3339)."),
            OpenApiParameter("to", datetime, description="Exclusive end (RFC 3339)."),
            OpenApiParameter("cursor", str, description="The `next` link's cursor."),
            LIMIT_PARAMETER,
        ],
        responses={
            200: inline_serializer(
                "AlertEventPage",
                {
                    "results": AlertEventSerializer(many=True),
                    "next": serializers.URLField(allow_null=True),
                },
            )
        },
    )
    def get(self, request):
        project = project_for_request(request)
        events = AlertEvent.objects.filter(project=project).select_related("rule")
        events = events.prefetch_related("notifications__channel")
        events = filter_events(events, request.query_params)  # FilterError: 400 (api.errors)
        return page_response(request, events, EVENT_KEYSET, AlertEventSerializer)

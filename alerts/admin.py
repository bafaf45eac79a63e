from __future__ import annotations

from django.contrib import admin

from alerts.models import AlertEvent, AlertState, Channel, DeliveryAttempt, Notification, Rule
from records.admin import AuditedAdmin


class AlertStateInline(admin.TabularInline):
    model = AlertState
    extra = 0
    can_delete = False
    fields = ("group", "state", "severity", "value", "count", "since", "notified_at")
    readonly_fields = fields

    def has_add_permission(self, request, obj=None) -> bool:
        return False  # states are the engine's


@admin.register(Rule)
class RuleAdmin(AuditedAdmin):
    list_display = ("name", "project", "metric", "comparator", "threshold", "paused")
    list_filter = ("project", "metric", "paused")
    search_fields = ("name",)
    filter_horizontal = ("channels",)
    readonly_fields = ("last_evaluated_at", "last_error", "created_at", "updated_at")
    inlines = [AlertStateInline]


@admin.register(Channel)
class ChannelAdmin(AuditedAdmin):
    list_display = ("name", "project", "kind", "disabled", "consecutive_failures", "last_error")
    list_filter = ("project", "kind", "disabled")
    search_fields = ("name", "url")
    readonly_fields = ("consecutive_failures", "disabled_at", "last_attempt_at", "last_error")


@admin.register(AlertEvent)
class AlertEventAdmin(admin.ModelAdmin):
    list_display = ("at", "rule", "group", "from_state", "to_state", "severity", "value")
    list_filter = ("project", "to_state", "reason")
    search_fields = ("rule__name", "group")
    date_hierarchy = "at"

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # history is what happened


class DeliveryAttemptInline(admin.TabularInline):
    model = DeliveryAttempt
    extra = 0
    can_delete = False
    readonly_fields = ("number", "at", "ok", "permanent", "error", "duration_ms")

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    list_display = ("event", "channel", "status", "attempts", "updated_at")
    list_filter = ("status", "channel")
    readonly_fields = ("event", "channel", "attempts", "created_at", "updated_at", "last_error")
    inlines = [DeliveryAttemptInline]

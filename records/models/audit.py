"""The audit log of a project: who changed its keys, members, alerting, prices and settings.

Rows are written only by records.store.audit_trail, in the transaction of the change they
describe, and read by records.metrics.audit_reads. Retention (records.store.retention) never
deletes them: they go only with their project.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from records.models.tenancy import ApiKey, Project


class AuditEntry(models.Model):
    """One change: who (an operator, a key, or a command), when, what (an action on an object
    of a type, by id and name), the changed fields before and after, and from which address."""

    class ActorKind(models.TextChoices):
        USER = "user", "user"
        KEY = "key", "API key"
        SYSTEM = "system", "command"

    # What an entry shows, in order: the API's fields and the exports' columns.
    SHOWN = (
        "id",
        "at",
        "actor_kind",
        "actor_name",
        "action",
        "object_type",
        "object_id",
        "object_name",
        "before",
        "after",
        "address",
    )

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="audit_entries")
    at = models.DateTimeField(default=timezone.now)
    actor_kind = models.CharField(max_length=10, choices=ActorKind.choices)
    # The operator's user name, a key's prefix and name, or a command's name: kept as written,
    # so that the entry still says who after the user or the key is gone.
    actor_name = models.CharField(max_length=200)
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    actor_key = models.ForeignKey(
        ApiKey,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    action = models.CharField(max_length=40)
    object_type = models.CharField(max_length=40)
    object_id = models.CharField(max_length=64, blank=True)
    object_name = models.CharField(max_length=200, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    address = models.GenericIPAddressField(null=True, blank=True)

    class Meta:
        verbose_name = "audit entry"
        verbose_name_plural = "audit entries"
        indexes = [
            # The page's and the API's keyset order: a project's entries, newest first.
            models.Index(fields=["project", "-id"], name="audit_entry_project_id")
        ]

    def __str__(self) -> str:
        return f"{self.actor_name} {self.action} {self.object_type} {self.object_name}"

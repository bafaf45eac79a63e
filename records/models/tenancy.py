"""Projects, who may see them, and their API keys."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

KEY_PREFIX = "dbk_"
LAST_USED_EVERY = timedelta(minutes=1)


def hash_key(raw_key: str) -> str:
    # Keys are 256-bit random tokens, so one fast hash is enough: there is nothing to brute-force.
    return hashlib.sha256(raw_key.encode()).hexdigest()


class ProjectQuerySet(models.QuerySet):
    def for_user(self, user) -> ProjectQuerySet:
        """The projects an operator may see: their memberships (a superuser, every project).
        The one rule of project access, for the pages and the read API alike."""
        if user.is_superuser:
            return self.all()
        return self.filter(memberships__user=user)


class Project(models.Model):
    name = models.SlugField(max_length=100, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    # Days of raw records kept; empty: DECISIONBOARD_RETENTION_DAYS (records.store.retention).
    retention_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Days of raw records kept for this project; empty for the global setting "
        "(DECISIONBOARD_RETENTION_DAYS). Rollups are kept longer "
        "(DECISIONBOARD_ROLLUP_RETENTION_DAYS).",
    )

    objects = ProjectQuerySet.as_manager()

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    """An operator's access to a project's pages and read API (superusers see every project)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "project"], name="membership_unique")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.project}"


class ApiKey(models.Model):
    class Scope(models.TextChoices):
        INGEST = "ingest", "ingest"
        READ = "read", "read"
        ALL = "all", "ingest and read"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, blank=True)
    scope = models.CharField(max_length=10, choices=Scope.choices, default=Scope.INGEST)
    prefix = models.CharField(max_length=12, help_text="The first characters, to recognise a key.")
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    rate_limit = models.CharField(
        max_length=30, blank=True, help_text="Overrides the ingest rate limit, e.g. 100/s."
    )
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # When a request last authenticated with the key, to the minute (api.auth writes it at
    # most once a minute per key, so a busy agent costs no write per request).
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.project}, {self.scope})"

    @classmethod
    def issue(
        cls, project: Project, scope: str = Scope.INGEST, name: str = ""
    ) -> tuple[ApiKey, str]:
        """Create a key and return it with the raw secret, which is never stored or shown again."""
        raw = KEY_PREFIX + secrets.token_urlsafe(32)
        key = cls.objects.create(
            project=project, scope=scope, name=name, prefix=raw[:10], key_hash=hash_key(raw)
        )
        return key, raw

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def allows(self, scope: str) -> bool:
        return self.scope == self.Scope.ALL or self.scope == scope

    def note_use(self, now=None) -> None:
        """Record that the key was used, unless that was already recorded in the last minute."""
        now = now or timezone.now()
        if self.last_used_at is not None and now - self.last_used_at < LAST_USED_EVERY:
            return
        ApiKey.objects.filter(pk=self.pk).update(last_used_at=now)
        self.last_used_at = now

    def revoke(self, now=None) -> None:
        if self.revoked_at is None:
            self.revoked_at = now or timezone.now()
            self.save(update_fields=["revoked_at"])

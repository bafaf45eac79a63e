"""Projects, who may see them, the invitations to them, and their API keys."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import DEFAULT_DB_ALIAS, connections, models
from django.db.models import Q
from django.utils import timezone

KEY_PREFIX = "dbk_"
LAST_USED_EVERY = timedelta(minutes=1)


def hash_key(raw_key: str) -> str:
    # Keys are 256-bit random tokens, so one fast hash is enough: there is nothing to brute-force.
    return hashlib.sha256(raw_key.encode()).hexdigest()


class Role(models.TextChoices):
    """What a member may do in a project, each role everything the one before may and more
    (docs/access.md): a viewer reads, an editor also changes alerting and prices, an admin
    also keys, members and the project's settings."""

    VIEWER = "viewer", "viewer"
    EDITOR = "editor", "editor"
    ADMIN = "admin", "admin"

    @property
    def with_article(self) -> str:
        return f"{'an' if self.value[0] in 'aeiou' else 'a'} {self.value}"

    def covers(self, needed: str) -> bool:
        return ROLE_ORDER.index(self) >= ROLE_ORDER.index(Role(needed))

    @classmethod
    def at_least(cls, needed: str) -> list[Role]:
        return ROLE_ORDER[ROLE_ORDER.index(Role(needed)) :]


ROLE_ORDER = [Role.VIEWER, Role.EDITOR, Role.ADMIN]


class ProjectQuerySet(models.QuerySet):
    def for_user(self, user, role: str = Role.VIEWER) -> ProjectQuerySet:
        """The projects an operator may see (or, given a role, act on with it): their
        memberships (a superuser, every project). The one rule of project access, for the
        pages and the read API alike."""
        if user.is_superuser:
            return self.all()
        if role == Role.VIEWER:
            return self.filter(memberships__user=user)
        return self.filter(memberships__user=user, memberships__role__in=Role.at_least(role))


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

    def role_of(self, user) -> Role | None:
        """The user's role here: a superuser is an admin of every project; None for a
        stranger."""
        if user.is_superuser:
            return Role.ADMIN
        if not user.is_authenticated:
            return None
        held = self.memberships.filter(user=user).values_list("role", flat=True).first()
        return Role(held) if held else None


class Membership(models.Model):
    """An operator's access to a project, with their role in it (superusers: admins of all)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    # A new member reads until given more; the memberships older than roles became admins.
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.VIEWER)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "project"], name="membership_unique")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.project}"


class Invitation(models.Model):
    """An admin's invitation of an e-mail address into a project with a role. Its link carries a
    random token of which only the hash is stored; it can be accepted once, by an account with
    that address, until it expires, is revoked or is replaced by a newer invitation of the same
    address (records.member_changes makes every change)."""

    class Unusable(models.TextChoices):
        EXPIRED = (
            "expired",
            "This invitation has expired: ask an admin of the project for a new one.",
        )
        REVOKED = (
            "revoked",
            "This invitation was withdrawn (revoked, or replaced by a newer one): use the "
            "latest invitation, or ask an admin of the project for a new one.",
        )
        ACCEPTED = "accepted", "This invitation has already been used: it works once."

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="invitations")
    # Kept lower-cased: an account's address matches it whatever its case.
    email = models.EmailField()
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.VIEWER)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # One live invitation an address and project: a second one replaces the first.
            models.UniqueConstraint(
                fields=["project", "email"],
                condition=Q(accepted_at__isnull=True, revoked_at__isnull=True),
                name="invitation_one_open",
            )
        ]

    def __str__(self) -> str:
        return f"{self.email} to {self.project} as {self.role}"

    @staticmethod
    def hash_token(token: str) -> str:
        # A 256-bit random token, as an API key is: one fast hash is enough.
        return hash_key(token)

    @classmethod
    def find(cls, token: str) -> Invitation | None:
        """The invitation a link's token names, read on the primary (a replica may not have it
        yet), with its project; None for a token no invitation has."""
        return (
            cls.objects.using(DEFAULT_DB_ALIAS)
            .select_related("project")
            .filter(token_hash=cls.hash_token(token))
            .first()
        )

    @classmethod
    def open_in(cls, project: Project) -> models.QuerySet:
        """The project's invitations neither accepted nor revoked (expired ones too, until an
        admin revokes or replaces them), by address."""
        return cls.objects.filter(
            project=project, accepted_at__isnull=True, revoked_at__isnull=True
        ).order_by("email")

    def unusable(self, now=None) -> Invitation.Unusable | None:
        """Why the link no longer works, or None while it does."""
        if self.accepted_at is not None:
            return self.Unusable.ACCEPTED
        if self.revoked_at is not None:
            return self.Unusable.REVOKED
        if self.expires_at <= (now or timezone.now()):
            return self.Unusable.EXPIRED
        return None

    def is_for(self, user) -> bool:
        """Whether `user`'s account has the invited address (in any case)."""
        return bool(user.email) and user.email.strip().lower() == self.email


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
    # When a request last authenticated with the key: written by the key's lookup (find_live)
    # when it is a minute old or more, and a process looks a key up once per cache life
    # (api.auth), so it is exact to a minute plus that life and a busy agent costs no write per
    # request.
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

    @classmethod
    def find_live(cls, key_hash: str, now=None, *, in_one_statement: bool) -> ApiKey | None:
        """The unrevoked key with this hash, its project loaded, on the primary; its use marked
        (note_use) in the same statement where the database can update inside a query (the
        primary may be a round trip away), after the read elsewhere. The caller asks the store
        backend which (records.store.key_lookup)."""
        now = now or timezone.now()
        if in_one_statement:
            return cls._find_and_mark(connections[DEFAULT_DB_ALIAS], key_hash, now)
        key = (
            cls.objects.using(DEFAULT_DB_ALIAS)
            .select_related("project")
            .filter(key_hash=key_hash, revoked_at__isnull=True)
            .first()
        )
        if key is not None:
            key.note_use(now)
        return key

    @classmethod
    def _find_and_mark(cls, connection, key_hash: str, now) -> ApiKey | None:
        # The outer SELECT reads the snapshot from before the UPDATE, so the mark it wrote is
        # taken from RETURNING. A concurrent lookup's UPDATE waits for this one's row lock, then
        # finds the mark fresh and writes nothing.
        quote = connection.ops.quote_name
        key_fields, project_fields = cls._meta.concrete_fields, Project._meta.concrete_fields
        columns = [
            "COALESCE(marked.last_used_at, k.last_used_at)"
            if field.attname == "last_used_at"
            else f"k.{quote(field.column)}"
            for field in key_fields
        ] + [f"p.{quote(field.column)}" for field in project_fields]
        keys, projects = quote(cls._meta.db_table), quote(Project._meta.db_table)
        sql = (
            f"WITH marked AS (UPDATE {keys} SET last_used_at = %(now)s"
            " WHERE key_hash = %(hash)s AND revoked_at IS NULL"
            " AND (last_used_at IS NULL OR last_used_at <= %(due)s) RETURNING id, last_used_at)"
            f" SELECT {', '.join(columns)} FROM {keys} k JOIN {projects} p ON p.id = k.project_id"
            " LEFT JOIN marked ON marked.id = k.id"
            " WHERE k.key_hash = %(hash)s AND k.revoked_at IS NULL"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, {"now": now, "hash": key_hash, "due": now - LAST_USED_EVERY})
            row = cursor.fetchone()
        if row is None:
            return None
        alias, split = connection.alias, len(key_fields)
        key = cls.from_db(alias, [f.attname for f in key_fields], row[:split])
        key.project = Project.from_db(alias, [f.attname for f in project_fields], row[split:])
        return key

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

"""The record store: projects, their API keys, runs and decision records."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

from records import keys

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
    # Days of raw records kept; empty: DECISIONBOARD_RETENTION_DAYS (records.retention).
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


class Run(models.Model):
    """One agent run, created the first time a record names its run_id."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="runs")
    run_id = models.CharField(max_length=200)
    parent_run_id = models.CharField(max_length=200, null=True, blank=True)
    agent = models.CharField(max_length=200, null=True, blank=True)
    session_id = models.CharField(max_length=200, null=True, blank=True)
    first_ts = models.DateTimeField()
    last_ts = models.DateTimeField()
    record_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    # The run summary, kept by the workers' catch-up pass (workers lag ingest by seconds).
    kind_counts = models.JSONField(default=dict)
    models_seen = models.JSONField(default=dict, help_text="{model: records naming it}")
    has_swap = models.BooleanField(default=False)
    has_fallback = models.BooleanField(default=False)
    has_error = models.BooleanField(default=False)
    has_contract_break = models.BooleanField(default=False)
    has_violation = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "run_id"], name="run_unique_per_project")
        ]
        indexes = [
            models.Index(fields=["project", "-last_ts", "-id"], name="run_recent"),
            models.Index(fields=["project", "parent_run_id"], name="run_parent"),
            # The read API's keyset: newest run first by id, which new records never change.
            models.Index(fields=["project", "-id"], name="run_keyset"),
            # The runs of a session, newest first (dashboard.sessions).
            models.Index(
                fields=["project", "session_id", "-last_ts", "-id"],
                condition=models.Q(session_id__isnull=False),
                name="run_session",
            ),
        ]

    def __str__(self) -> str:
        return self.run_id


class Record(models.Model):
    """One decision record: the envelope as posted, facet columns derived on ingest, the data.

    The facet columns are what filters, metrics and pages query; `data` is kept exactly as posted
    (unknown fields included) and `derived` holds the per-kind derived fields.

    On PostgreSQL the table is partitioned by day of `ts` (records.partitions, migration 0009):
    its real primary key is (id, ts), `id` is still unique (one sequence) and what Django
    addresses a record by, and `record_key_unique` below exists on SQLite only: a partitioned
    table cannot hold a unique index without the partition key, so RecordKey holds the
    (project, record_key) uniqueness there.
    """

    # No index of its own: record_ts (project, ts) and the others lead with the project, and
    # every index is paid for on each insert.
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="records", db_index=False
    )
    record_key = models.CharField(
        max_length=200, help_text="The posted id, or sha256: of the canonical record without one."
    )
    kind = models.CharField(max_length=40)
    run_id = models.CharField(max_length=200)
    ts = models.DateTimeField()
    received_at = models.DateTimeField()
    session_id = models.CharField(max_length=200, null=True, blank=True)
    agent = models.CharField(max_length=200, null=True, blank=True)
    parent_run_id = models.CharField(max_length=200, null=True, blank=True)
    # The model a metric groups this record by (classifier.model for picks,
    # default_model for selections, model for verdicts, calls and provider errors).
    model = models.CharField(max_length=200, null=True, blank=True)
    iteration = models.IntegerField(null=True, blank=True)
    latency_ms = models.FloatField(null=True, blank=True)
    skip_reason = models.CharField(max_length=20, null=True, blank=True)
    outcome = models.CharField(max_length=200, null=True, blank=True)
    is_swap = models.BooleanField(default=False)
    is_fallback = models.BooleanField(default=False)
    is_error = models.BooleanField(default=False)
    is_contract_break = models.BooleanField(default=False)
    # Within its kind, what rollups group the record by (see records.derive.Derived).
    rollup_key = models.CharField(max_length=450, default="", blank=True)
    tokens_in = models.BigIntegerField(null=True, blank=True)
    tokens_out = models.BigIntegerField(null=True, blank=True)
    # "|a|b|": every model the record names, when it names more than `model` (a selection's
    # selected and previous model, a verdict's seat): the `model` filter matches these too.
    named_models = models.TextField(null=True, blank=True)
    # derived.violations is not empty; the catch-up may set it later (a notice
    # repeated in its run).
    has_violation = models.BooleanField(default=False)
    data = models.JSONField()
    derived = models.JSONField(default=dict)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "record_key"], name="record_key_unique")
        ]
        indexes = [
            models.Index(fields=["project", "ts"], name="record_ts"),
            models.Index(fields=["project", "run_id", "ts"], name="record_run_ts"),
            # The verdicts of one model in a time span, for the streak recompute
            # (records.rollup._SEGMENTS_SQL probes it around each parse error; SQLite's
            # _verdicts_query reads it). Verdicts only: an index over every kind, (project, kind,
            # ts), wrote 41 % of the WAL of out-of-order ingest (migration 0019), and the records
            # list filters a kind as it filters an agent or a model, along record_ts.
            models.Index(
                fields=["project", "model", "ts"],
                condition=models.Q(kind="classifier.verdict"),
                name="record_verdict_model_ts",
            ),
            # The parse errors of one model in a time span: what the streak recompute starts
            # from (migration 0024). About one record in a hundred.
            models.Index(
                fields=["project", "model", "ts"],
                condition=models.Q(kind="classifier.verdict", outcome="parse_error"),
                name="record_broken_ts",
            ),
            # The notices of one code in a window (rollup_key starts with the code): alert
            # rules on a notice's detail count these (alerts.notices). Notices only, so the
            # other kinds' ingest pays nothing for it.
            models.Index(
                fields=["project", "rollup_key", "ts"],
                condition=models.Q(kind="notice"),
                name="record_notice_code",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.run_id} {self.ts:%Y-%m-%dT%H:%M:%S}"


class RecordKey(models.Model):
    """The posted ids (record keys) of the records stored, one row per record, on PostgreSQL.

    The records table is partitioned by time, so no index on it can make (project, record_key)
    unique across days: ingest inserts the key here first (ON CONFLICT DO NOTHING) and stores
    only the records whose key was new, so a resend is a duplicate whatever its `ts`. A key
    lives as long as its record: deleting a record deletes its key (a trigger), and expiring a
    partition deletes the keys of its day (records.partitions), found by `day` rather than one
    primary-key lookup each. Empty on SQLite, whose plain records table keeps
    `record_key_unique`.
    """

    pk = models.CompositePrimaryKey("project", "record_key")
    # No index of its own: the primary key's (project_id, record_key) leads with it.
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+", db_index=False)
    record_key = models.CharField(max_length=200)
    # The UTC day of the record's ts, so its partition's. Set when the key is inserted, which is
    # when its record is stored; a resend with another ts is a duplicate and leaves it.
    day = models.DateField()

    class Meta:
        indexes = [models.Index(fields=["day"], name="record_key_day")]

    def __str__(self) -> str:
        return self.record_key


class Watermark(models.Model):
    """How far the catch-up pass has read the records table: every id <= last_id is rolled up."""

    name = models.CharField(max_length=50, unique=True)
    last_id = models.BigIntegerField(default=0)
    last_pass_at = models.DateTimeField(null=True, blank=True)
    # When the lane's last pass that folded records began (records.rollup.PASS_SPACING_SECONDS);
    # last_pass_at moves with every pass, an empty one too (the catch-up's liveness).
    last_fold_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} @ {self.last_id}"


class PendingBatch(models.Model):
    """A stored ingest batch of a project that its catch-up lane has not folded yet: the
    newest record id it stored and when it arrived (its records' received_at).

    Ingest inserts one row per batch that stored records, in the batch's transaction (an
    insert: concurrent batches of one project never wait on a shared row); the lane's pass
    deletes its projects' rows at or below the watermark it commits. A project's freshness
    (records.freshness.project_freshness) is its first row above its lane's watermark: one
    index probe, whatever the project's or the other projects' backlog.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+", db_index=False)
    last_id = models.BigIntegerField()
    received_at = models.DateTimeField()

    class Meta:
        # Leads with the project: freshness reads a project's first row above a watermark.
        indexes = [models.Index(fields=["project", "last_id"], name="pending_batch_last_id")]

    def __str__(self) -> str:
        return f"{self.project_id} @ {self.last_id}"


class Grain(models.TextChoices):
    MINUTE = "minute"
    HOUR = "hour"
    DAY = "day"


def catch_up_project() -> models.ForeignKey:
    """The project of a table only the catch-up writes, derived from the records: no index of
    its own (each such table's unique key leads with the project) and no constraint in the
    database (each row a pass inserted cost a check at commit). Deleting a project still
    deletes the rows (Django's cascade), and a rebuild writes them again from the records."""
    return models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )


class Rollup(models.Model):
    """Counts, token sums and a latency sketch of one kind's records in one time bucket.

    One row per (project, grain, bucket, kind, agent, model, key): `model` is the model the
    metric groups by (records.derive) and `key` what the kind is split by within it. Metrics are
    computed from these rows only (records.metrics), never from raw records.
    """

    project = catch_up_project()
    grain = models.CharField(max_length=6, choices=Grain.choices)
    bucket = models.DateTimeField()
    kind = models.CharField(max_length=40)
    agent = models.CharField(max_length=200, default="", blank=True)
    model = models.CharField(max_length=200, default="", blank=True)
    key = models.CharField(max_length=450, default="", blank=True)
    count = models.BigIntegerField(default=0)
    tokens_in = models.BigIntegerField(default=0)
    tokens_out = models.BigIntegerField(default=0)
    latency_sum = models.FloatField(default=0)
    sketch = models.JSONField(default=dict)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "grain", "bucket", "kind", "agent", "model", "key"],
                name="rollup_unique",
            )
        ]
        # The unique key's (project, grain, bucket) prefix serves a read of every kind over a
        # range (the records counts); a read of a few kinds (a metric, a page's rates, the
        # latency sketches) walks only their rows along rollup_kind_bucket instead of every
        # kind's in the range (migration 0021).
        # rollup_tool_key: whether a project ever knew a tool (a tool page's 404) is one probe
        # of the tool kinds' day rows by key prefix (records.reader.any_key), whatever the
        # number of days kept; the pattern opclass lets PostgreSQL serve LIKE 'name|%' from it
        # under any collation (ignored elsewhere).
        indexes = [
            models.Index(fields=["project", "grain", "kind", "bucket"], name="rollup_kind_bucket"),
            models.Index(
                fields=["project", "key"],
                name="rollup_tool_key",
                opclasses=["int8_ops", "varchar_pattern_ops"],
                condition=models.Q(grain="day", kind__in=[keys.TOOL, keys.TOOL_CALL]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.grain} {self.bucket:%Y-%m-%dT%H:%M} {self.model} {self.key}"


class Classification(models.Model):
    """One classification of a gated tool call (the ladder fallback rate): the attempts
    of one (run_id, toolCallId), kept by the catch-up pass.

    It counts in the bucket of its first rung-0 attempt (`first_ts`), under that attempt's seat
    model and agent, and fell back when any rung-1 attempt exists, whenever it arrives; a rung-1
    attempt that arrives first waits here for its rung-0 attempt. The CLASSIFICATION rollups hold
    exactly the contribution these fields describe, so a change moves that contribution.
    """

    project = catch_up_project()
    run_id = models.CharField(max_length=200)
    tool_call_id = models.CharField(max_length=200)
    first_ts = models.DateTimeField(null=True, blank=True)
    first_key = models.CharField(max_length=200, default="", blank=True)
    seat_model = models.CharField(max_length=200, default="", blank=True)
    agent = models.CharField(max_length=200, default="", blank=True)
    fell_back = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "run_id", "tool_call_id"], name="classification_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.tool_call_id}"


class ToolDecision(models.Model):
    """One tool decision (run_id, iteration) as the catch-up pass has seen it so far: the pick
    that counts for it and the outcome that counts for it (records.tools).

    Each side is the earliest of its kind by (ts, record key), whichever arrived first, and is
    kept as the compact JSON records.tools needs (`pick`, `outcome`: "" until one arrives). The
    TOOL_LINK, SELECTION_LINK and NARROWING rollups hold exactly the contribution of the decisions
    whose two sides are both here, so a change of either side moves that contribution.
    """

    project = catch_up_project()
    run_id = models.CharField(max_length=200)
    iteration = models.IntegerField()
    pick = models.TextField(default="", blank=True)
    outcome = models.TextField(default="", blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "run_id", "iteration"], name="tool_decision_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.iteration}"


class ToolMiss(models.Model):
    """How many of a run's tool decisions missed `tool` (records.tools: called or wanted, offered
    and not served), kept by the catch-up pass with the TOOL_LINK rows, so that a tool's page
    lists the runs where it was missed without reading a record. A row at zero is deleted."""

    project = catch_up_project()
    tool = models.CharField(max_length=200)
    run_id = models.CharField(max_length=200)
    misses = models.IntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "tool", "run_id"], name="tool_miss_unique")
        ]
        # A run's rows, deleted with the run (records.retention).
        indexes = [models.Index(fields=["project", "run_id"], name="tool_miss_run")]

    def __str__(self) -> str:
        return f"{self.tool} in {self.run_id}: {self.misses}"


class Streak(models.Model):
    """The contract-broken streak of one model, in verdict `ts` order.

    The fold of the model's StreakSegment days (records.streaks), kept for reading.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    model = models.CharField(max_length=200)
    current = models.PositiveIntegerField(default=0)
    longest = models.PositiveIntegerField(default=0)
    last_broken_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "model"], name="streak_unique")]

    def __str__(self) -> str:
        return f"{self.model}: {self.current} (longest {self.longest})"


class StreakSegment(models.Model):
    """records.streaks.Segment of one model's verdicts in one minute, hour or day."""

    project = catch_up_project()
    model = models.CharField(max_length=200)
    grain = models.CharField(max_length=6, choices=Grain.choices)
    bucket = models.DateTimeField()
    has_ruling = models.BooleanField(default=False)
    prefix = models.PositiveIntegerField(default=0)
    suffix = models.PositiveIntegerField(default=0)
    longest = models.PositiveIntegerField(default=0)
    last_broken_at = models.DateTimeField(null=True, blank=True)
    last_ts = models.DateTimeField()
    last_key = models.CharField(max_length=200)
    # A minute that a late verdict fell into: its segment (and its hour's, day's and the model's
    # streak) is recomputed from the raw verdicts once at the end of a catch-up, not by every
    # pass that brings it another one (records.rollup.fold_dirty_streaks).
    dirty = models.BooleanField(default=False)
    # The watermark of the last pass that marked it dirty: the recompute reads the verdicts
    # without the lane's lock, and a minute marked past the watermark it read stays dirty.
    dirty_upto = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "model", "grain", "bucket"], name="segment_unique"
            )
        ]
        indexes = [
            models.Index(
                fields=["project", "model", "bucket"],
                condition=models.Q(dirty=True),
                name="segment_dirty",
            )
        ]

    def __str__(self) -> str:
        return f"{self.model} {self.grain} {self.bucket:%Y-%m-%dT%H:%M}"

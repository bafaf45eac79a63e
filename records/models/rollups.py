"""What the catch-up writes from the records: watermarks, rollups, classifications,
tool decisions and streaks."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from records.models.tenancy import Project

# A catch-up lane's watermark row; lane i of n > 1 is "rollups:i/n" (lane_name).
LANE_WATERMARK = "rollups"


# The names of the lanes' watermark rows, here beside the rows: the catch-up (records.catchup.lanes)
# writes them, the read path (records.metrics.freshness) reads them.
def configured_lanes() -> int:
    return settings.DECISIONBOARD["CATCHUP_LANES"]


def lane_of(project_id: int, lanes: int) -> int:
    """The lane of a project. Project ids are handed out in sequence, so the modulo deals the
    projects round robin; a hash would only shuffle them."""
    return project_id % lanes


def lane_name(lane: int, lanes: int) -> str:
    """The Watermark row of a lane; one lane keeps the name the single pass always had."""
    return LANE_WATERMARK if lanes == 1 else f"{LANE_WATERMARK}:{lane}/{lanes}"


def parse_lane_name(name: str) -> tuple[int, int]:
    """lane_name's inverse: (lane, lanes)."""
    if name == LANE_WATERMARK:
        return 0, 1
    lane, lanes = name.removeprefix(LANE_WATERMARK + ":").split("/")
    return int(lane), int(lanes)


def streaks_folded_name(lane: int, lanes: int) -> str:
    """The Watermark row whose last_pass_at is when the lane last folded its dirty streak
    minutes (records.catchup.streak_fold); not a lane's watermark (Watermark.objects.lanes)."""
    return "streaks:" + lane_name(lane, lanes)


class WatermarkQuerySet(models.QuerySet):
    def lanes(self) -> WatermarkQuerySet:
        """The catch-up lanes' rows: of one lane count at a time (records.catchup.passes switches
        them in one transaction)."""
        return self.filter(Q(name=LANE_WATERMARK) | Q(name__startswith=LANE_WATERMARK + ":"))

    def folded_upto(self) -> int:
        """The id up to which every record is folded, whichever its lane: the lowest lane's."""
        return min(self.lanes().values_list("last_id", flat=True), default=0)


class Watermark(models.Model):
    """How far the catch-up pass has read the records table: every id <= last_id is rolled up."""

    name = models.CharField(max_length=50, unique=True)
    last_id = models.BigIntegerField(default=0)
    last_pass_at = models.DateTimeField(null=True, blank=True)
    # When the lane's last pass that folded records began
    # (records.catchup.passes.PASS_SPACING_SECONDS); last_pass_at moves with every pass, an empty
    # one too (the catch-up's liveness).
    last_fold_at = models.DateTimeField(null=True, blank=True)

    objects = WatermarkQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.name} @ {self.last_id}"


class PendingBatch(models.Model):
    """A stored ingest batch of a project that its catch-up lane has not folded yet: the
    newest record id it stored and when it arrived (its records' received_at).

    Ingest inserts one row per batch that stored records, in the batch's transaction (an
    insert: concurrent batches of one project never wait on a shared row); the lane's pass
    deletes its projects' rows at or below the watermark it commits. A project's freshness
    (records.metrics.freshness.project_freshness) is its first row above its lane's watermark: one
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

    One row per (project, grain, bucket, kind, agent, model, key, release): `model` is the model
    the metric groups by (records.contract.derive), `key` what the kind is split by within it and
    `release` the release its records named ("" for none). Metrics are computed from these rows
    only (records.metrics.definitions), never from raw records.
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
    # Spend of the row's records in nano-USD, how many carried usage, and how many of those
    # had no known price (records.contract.cost): the unknown share beside every total.
    cost_nano = models.BigIntegerField(default=0, db_default=0)
    cost_records = models.BigIntegerField(default=0, db_default=0)
    cost_unknown = models.BigIntegerField(default=0, db_default=0)
    # Last in the unique key: a read of every release (no release filter) sums over it, and the
    # key's (project, grain, bucket) prefix serves it as before.
    release = models.CharField(max_length=200, default="", blank=True, db_default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "grain", "bucket", "kind", "agent", "model", "key", "release"],
                name="rollup_unique",
            )
        ]
        # The unique key's (project, grain, bucket) prefix serves a read of every kind over a
        # range (the records counts); a read of a few kinds (a metric, a page's rates, the
        # latency sketches) walks only their rows along rollup_kind_bucket instead of every
        # kind's in the range (migration 0021).
        # rollup_tool_key: whether a project ever knew a tool (a tool page's 404) is one probe
        # of the tool kinds' day rows by key prefix (records.metrics.reader.any_key), whatever the
        # number of days kept; the pattern opclass lets PostgreSQL serve LIKE 'name|%' from it
        # under any collation (ignored elsewhere).
        # rollup_release_day: a release compared whole (records.metrics.release_comparison)
        # reads every day row of that release; by the unique key it walked the day rows of every
        # release of the project and dropped the others'. The release leads, so that no read
        # without one takes this index for the project's day rows.
        indexes = [
            models.Index(fields=["project", "grain", "kind", "bucket"], name="rollup_kind_bucket"),
            models.Index(
                fields=["release", "project", "kind", "bucket"],
                name="rollup_release_day",
                condition=models.Q(grain="day"),
            ),
            models.Index(
                fields=["project", "key"],
                name="rollup_tool_key",
                opclasses=["int8_ops", "varchar_pattern_ops"],
                # rollup_keys.TOOL and TOOL_CALL, spelt out: the models sit below the contract
                # (tests/records/metrics/test_tools.py holds the two together).
                condition=models.Q(grain="day", kind__in=["derived.tool", "derived.tool_call"]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.grain} {self.bucket:%Y-%m-%dT%H:%M} {self.model} {self.key}"


class Classification(models.Model):
    """One classification of a gated tool call (the ladder fallback rate): the attempts
    of one (run_id, toolCallId), kept by the catch-up pass.

    It counts in the bucket of its first rung-0 attempt (`first_ts`), under that attempt's seat
    model and agent, and fell back when any rung-1 attempt exists, whenever it arrives; a rung-1
    attempt that arrives first waits here for its rung-0 attempt. Its `cause` is what the seat's
    last attempt (`seat_ts`, `seat_key`: rung 0, a re-ask too) came to
    (records.contract.fallback_causes.LADDER_CAUSES). The CLASSIFICATION rollups hold exactly
    the contribution these fields describe, so a change moves that contribution.
    """

    project = catch_up_project()
    run_id = models.CharField(max_length=200)
    tool_call_id = models.CharField(max_length=200)
    first_ts = models.DateTimeField(null=True, blank=True)
    first_key = models.CharField(max_length=200, default="", blank=True)
    seat_model = models.CharField(max_length=200, default="", blank=True)
    agent = models.CharField(max_length=200, default="", blank=True)
    # The release of its first rung-0 attempt ("" for none): its CLASSIFICATION rows' release.
    release = models.CharField(max_length=200, default="", blank=True, db_default="")
    fell_back = models.BooleanField(default=False)
    seat_ts = models.DateTimeField(null=True, blank=True)
    seat_key = models.CharField(max_length=200, default="", blank=True, db_default="")
    # "" for a classification folded before causes were kept, until a rebuild.
    cause = models.CharField(max_length=20, default="", blank=True, db_default="")

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
    that counts for it and the outcome that counts for it (records.catchup.tool_funnel).

    Each side is the earliest of its kind by (ts, record key), whichever arrived first, and is kept
    as the compact JSON records.catchup.tool_funnel needs (`pick`, `outcome`: "" until one arrives).
    The TOOL_LINK, SELECTION_LINK and NARROWING rollups hold exactly the contribution of the
    decisions whose two sides are both here, so a change of either side moves that contribution.
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
    """How many of a run's tool decisions missed `tool` (records.catchup.tool_funnel: called or
    wanted, offered and not served), kept by the catch-up pass with the TOOL_LINK rows, so that a
    tool's page lists the runs where it was missed without reading a record. A row at zero is
    deleted."""

    project = catch_up_project()
    tool = models.CharField(max_length=200)
    run_id = models.CharField(max_length=200)
    misses = models.IntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "tool", "run_id"], name="tool_miss_unique")
        ]
        # A run's rows, deleted with the run (records.store.retention).
        indexes = [models.Index(fields=["project", "run_id"], name="tool_miss_run")]

    def __str__(self) -> str:
        return f"{self.tool} in {self.run_id}: {self.misses}"


class Streak(models.Model):
    """The contract-broken streak of one model, in verdict `ts` order.

    The fold of the model's StreakSegment days (records.contract.streak_segments), kept for reading.
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
    """records.contract.streak_segments.Segment of one model's verdicts in one minute, hour or
    day."""

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
    # pass that brings it another one (records.catchup.streak_fold.fold_dirty_streaks).
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

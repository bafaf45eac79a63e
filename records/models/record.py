"""Runs and decision records, and the key that makes a record's ingest idempotent."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from records.models.tenancy import Project


class Run(models.Model):
    """One agent run, created the first time a record names its run_id."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="runs")
    run_id = models.CharField(max_length=200)
    parent_run_id = models.CharField(max_length=200, null=True, blank=True)
    agent = models.CharField(max_length=200, null=True, blank=True)
    # Kept as the agent is: the greatest release its folded records name (the catch-up), so a run
    # that names one release, as runs do, carries it whatever order its records arrive in.
    release = models.CharField(max_length=200, null=True, blank=True)
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
    # The run's spend in nano-USD and its records with usage but no known price.
    cost_nano = models.BigIntegerField(default=0, db_default=0)
    cost_unknown = models.IntegerField(default=0, db_default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "run_id"], name="run_unique_per_project")
        ]
        indexes = [
            models.Index(fields=["project", "-last_ts", "-id"], name="run_recent"),
            models.Index(fields=["project", "parent_run_id"], name="run_parent"),
            # The read API's keyset: newest run first by id, which new records never change.
            models.Index(fields=["project", "-id"], name="run_keyset"),
            # The runs of a session, newest first (dashboard.views.sessions).
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

    On PostgreSQL the table is partitioned by day of `ts` (records.store.partitions, migration
    0009): its real primary key is (id, ts), `id` is still unique (one sequence) and what Django
    addresses a record by, and `record_key_unique` below exists on SQLite only: a partitioned table
    cannot hold a unique index without the partition key, so RecordKey holds the (project,
    record_key) uniqueness there.
    """

    # No index of its own: record_ts (project, ts) and the others lead with the project, and
    # every index is paid for on each insert. No constraint in the database either (a check at
    # commit for every row inserted): the writer holds the project row with a key-share lock for
    # the batch instead, and deleting a project locks that row first (records.store.writer).
    project = models.ForeignKey(
        Project,
        on_delete=models.CASCADE,
        related_name="records",
        db_index=False,
        db_constraint=False,
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
    # Within its kind, what rollups group the record by (see records.contract.derive.Derived).
    rollup_key = models.CharField(max_length=450, default="", blank=True)
    tokens_in = models.BigIntegerField(null=True, blank=True)
    tokens_out = models.BigIntegerField(null=True, blank=True)
    # "|a|b|": every model the record names, when it names more than `model` (a selection's
    # selected and previous model, a verdict's seat): the `model` filter matches these too.
    named_models = models.TextField(null=True, blank=True)
    # derived.violations is not empty; the catch-up may set it later (a notice
    # repeated in its run).
    has_violation = models.BooleanField(default=False)
    # What the record cost, priced on ingest (records.contract.cost): nano-USD, and where the
    # price came from (reported, genai-prices, override; unknown with no price). Both null
    # for a record without usage. The read API shows them as derived.cost.
    cost_nano = models.BigIntegerField(null=True, blank=True)
    cost_source = models.CharField(max_length=12, null=True, blank=True)
    # What the agent ran as (a version, a prompt hash, a git sha), as posted; null when the
    # record did not say (every record stored before the envelope had it).
    release = models.CharField(max_length=200, null=True, blank=True)
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
            # (records.catchup.streak_fold.SEGMENTS_SQL probes it around each parse error; SQLite's
            # verdicts_query reads it). Verdicts only: an index over every kind, (project, kind,
            # ts), wrote much of the WAL of out-of-order ingest (migration 0019), and the records
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
    partition deletes the keys of its day (records.store.partitions), found by `day` rather than one
    primary-key lookup each. Empty on SQLite, whose plain records table keeps
    `record_key_unique`.
    """

    pk = models.CompositePrimaryKey("project", "record_key")
    # No index of its own: the primary key's (project_id, record_key) leads with it. No
    # constraint, as for Record.project.
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    record_key = models.CharField(max_length=200)
    # The UTC day of the record's ts, so its partition's. Set when the key is inserted, which is
    # when its record is stored; a resend with another ts is a duplicate and leaves it.
    day = models.DateField()

    class Meta:
        indexes = [models.Index(fields=["day"], name="record_key_day")]

    def __str__(self) -> str:
        return self.record_key

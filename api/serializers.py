"""Read-only representations of runs, records and export jobs for the read API.

They shape responses and document them in the OpenAPI schema; nothing is written through them
(ingest validates with records.contract.normalise, the export job is created by
workers.export_jobs).
"""

from __future__ import annotations

from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.openapi import RecordDataSerializer
from records.contract.cost import NANO_PER_USD, describe
from records.contract.filters import HAS_FLAGS, FilterError, parse_time
from records.contract.kinds import KIND_NAMES
from records.store import retention
from workers.models import ExportJob


@extend_schema_field(RecordDataSerializer)
class RecordDataField(serializers.JSONField):
    """`data` as posted, documented as the union of every kind's payload."""


class RecordDerivedField(serializers.JSONField):
    """`derived` as stored, with `cost` from the record's cost columns when it had usage."""

    def __init__(self, **kwargs):
        super().__init__(source="*", **kwargs)

    def to_representation(self, record):
        cost = describe(record.cost_nano, record.cost_source, record.model)
        return record.derived if cost is None else {**record.derived, "cost": cost}


class RecordSerializer(serializers.Serializer):
    """A record as posted (the envelope and its `data`), plus the fields derived on ingest."""

    id = serializers.CharField(
        source="record_key",
        help_text="The posted id, or sha256:<hash of the canonical record> when none was posted.",
    )
    kind = serializers.ChoiceField(choices=KIND_NAMES)
    run_id = serializers.CharField()
    ts = serializers.DateTimeField()
    session_id = serializers.CharField(allow_null=True)
    agent = serializers.CharField(allow_null=True)
    parent_run_id = serializers.CharField(allow_null=True)
    release = serializers.CharField(
        allow_null=True,
        help_text="What the agent ran as (a version, a prompt hash, a git sha), as posted; "
        "null when the record did not say.",
    )
    data = RecordDataField()
    derived = RecordDerivedField(
        help_text="Per-kind derived fields, e.g. `doors` of a pick, `swap` of a "
        "model selection, each call's action name and `invented` of a turn; `cost` "
        "({usd, source, reason?}) of a record with usage, `usd` null when its price is unknown."
    )


HAS_SCHEMA = {
    "type": "object",
    "properties": {flag: {"type": "boolean"} for flag in HAS_FLAGS},
    "required": list(HAS_FLAGS),
}


class RunSerializer(serializers.Serializer):
    """A run and its counters. The workers keep the time span, counts and summary: they follow
    ingest by a few seconds."""

    run_id = serializers.CharField()
    parent_run_id = serializers.CharField(allow_null=True)
    agent = serializers.CharField(allow_null=True)
    session_id = serializers.CharField(allow_null=True)
    first_ts = serializers.DateTimeField()
    last_ts = serializers.DateTimeField()
    record_count = serializers.IntegerField()
    kind_counts = serializers.DictField(
        child=serializers.IntegerField(), help_text="Records of each kind in the run."
    )
    models_seen = serializers.DictField(
        child=serializers.IntegerField(), help_text="Records naming each model in the run."
    )
    has = serializers.SerializerMethodField()
    cost_usd = serializers.SerializerMethodField(
        help_text="The run's spend in USD: its picks' classifier usage, model calls and "
        "reported turn costs, priced (records with no known price left out: cost_unknown)."
    )
    cost_unknown = serializers.IntegerField(
        help_text="The run's records with usage whose price is unknown."
    )

    @extend_schema_field(HAS_SCHEMA)
    def get_has(self, run) -> dict[str, bool]:
        return {flag: getattr(run, f"has_{flag}") for flag in HAS_FLAGS}

    def get_cost_usd(self, run) -> float:
        return run.cost_nano / NANO_PER_USD


class RunDetailSerializer(RunSerializer):
    sub_runs = serializers.SerializerMethodField(
        help_text="Runs whose parent_run_id is this run (the first 1,000, oldest first)."
    )

    @extend_schema_field(RunSerializer(many=True))
    def get_sub_runs(self, run) -> list[dict]:
        return RunSerializer(self.context["sub_runs"], many=True).data


class ExportJobSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=ExportJob.Status.choices)
    format = serializers.ChoiceField(choices=ExportJob.Format.choices)
    filters = serializers.DictField(
        child=serializers.CharField(), help_text="The filter parameters the export was asked with."
    )
    rows = serializers.IntegerField(help_text="Rows written so far.")
    total_rows = serializers.IntegerField(
        allow_null=True, help_text="Rows matching when the job started."
    )
    progress = serializers.FloatField(help_text="From 0 to 1.")
    download_url = serializers.SerializerMethodField()
    size_bytes = serializers.IntegerField(allow_null=True)
    error = serializers.CharField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    expires_at = serializers.DateTimeField(
        allow_null=True, help_text="When the file is deleted (the job then reads expired)."
    )
    past_retention = serializers.SerializerMethodField(
        help_text="Set when `from` is before the oldest record kept when the job was started: "
        "what the export misses (the project's retention)."
    )

    @extend_schema_field({"type": ["string", "null"]})
    def get_past_retention(self, job: ExportJob) -> str | None:
        try:
            start = parse_time("from", job.filters["from"]) if job.filters.get("from") else None
        except FilterError:
            return None
        return retention.past_retention_notice(job.project, start, job.created_at)

    @extend_schema_field({"type": ["string", "null"], "format": "uri"})
    def get_download_url(self, job: ExportJob) -> str | None:
        if job.status != ExportJob.Status.DONE:
            return None
        return self.context["request"].build_absolute_uri(
            reverse("api-export-download", args=[job.pk])
        )

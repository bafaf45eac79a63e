"""The one filter vocabulary: from, to, agent, release, model, kind, run_id, session_id, has.

`parse_filters` turns query parameters into `Filters`, or raises FilterError naming the parameter;
the API lists, the metrics, the runs page and the exports all read the same `Filters`, and
`filter_records` / `filter_runs` apply them to a queryset. `parse_time` is the one reader of a
time from outside (parameters and cursors alike): whatever text it is given, it returns a UTC
time that arithmetic of a day either way cannot push off the calendar, or FilterError.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

import msgspec
from django.db.models import Exists, OuterRef, Q, QuerySet

from records.contract import rollup_keys
from records.contract.kinds import KIND_NAMES
from records.contract.schema import Timestamp
from records.models import Record

HAS_FLAGS = {
    "swap": "is_swap",
    "fallback": "is_fallback",
    "error": "is_error",
    "contract_break": "is_contract_break",
    "violation": "has_violation",
}
# The run summary's column of each flag (records.models.Run).
_RUN_FLAGS = {flag: f"has_{flag}" for flag in HAS_FLAGS}
MAX_VALUES = 50
# Times a filter or cursor may name: a day inside the calendar's ends, so that a default range
# (to minus 24 h) or a bucket rounded to the day stays a date; no record is stored outside it.
EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
LATEST = datetime(9999, 12, 30, tzinfo=UTC)
_OUT_OF_RANGE = "is out of range: times run from 0001-01-02 to 9999-12-30 (UTC)"
# Every parameter of the vocabulary, in the order forms show them.
PARAMS = ("from", "to", "agent", "release", "model", "kind", "run_id", "session_id", "has")


class FilterError(ValueError):
    def __init__(self, param: str, message: str):
        super().__init__(f"{param}: {message}")
        self.param = param
        self.message = message


@dataclass(frozen=True)
class Filters:
    start: datetime | None = None
    end: datetime | None = None
    agents: list[str] = field(default_factory=list)
    releases: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)
    session_ids: list[str] = field(default_factory=list)
    has: list[str] = field(default_factory=list)


def parse_time(param: str, value: object) -> datetime:
    """An RFC 3339 time with an offset, as UTC, within EARLIEST..LATEST; else FilterError."""
    try:
        moment = msgspec.convert(value, Timestamp)
    except (msgspec.ValidationError, UnicodeEncodeError):  # msgspec encodes text as UTF-8
        raise FilterError(
            param,
            f"{value!r} is not an RFC 3339 timestamp with an offset, e.g. 2026-11-20T09:00:00Z",
        ) from None
    try:
        # An offset can push a valid local time past year 9999 or before year 1.
        moment = moment.astimezone(UTC)
    except OverflowError:
        raise FilterError(param, _OUT_OF_RANGE) from None
    if not EARLIEST <= moment <= LATEST:
        raise FilterError(param, _OUT_OF_RANGE)
    return moment


def _list(params: Mapping[str, str], name: str) -> list[str]:
    raw = params.get(name)
    if raw is None or raw == "":
        return []
    values = [v.strip() for v in raw.split(",") if v.strip()]
    if len(values) > MAX_VALUES:
        raise FilterError(name, f"at most {MAX_VALUES} values")
    if any(len(v) > 200 for v in values):
        raise FilterError(name, "values are at most 200 characters")
    for value in values:
        check_text(name, value)
    return values


def check_text(param: str, value: str) -> str:
    """`value` if a database can hold it as text: no NUL (no stored value holds one, and
    PostgreSQL refuses it) and no lone surrogate (not Unicode at all); else FilterError."""
    if "\x00" in value:
        raise FilterError(param, "must not contain a NUL character")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise FilterError(param, "is not valid Unicode (a lone surrogate)") from None
    return value


def parse_filters(params: Mapping[str, str]) -> Filters:
    """`Filters` from query parameters (or a body's strings); FilterError names a bad one."""
    start = parse_time("from", params["from"]) if params.get("from") else None
    end = parse_time("to", params["to"]) if params.get("to") else None
    if start and end and end <= start:
        raise FilterError("to", "must be after from")
    kinds = _list(params, "kind")
    unknown = [k for k in kinds if k not in KIND_NAMES]
    if unknown:
        raise FilterError("kind", f"unknown kind {unknown[0]!r}; one of: {', '.join(KIND_NAMES)}")
    has = _list(params, "has")
    bad = [h for h in has if h not in HAS_FLAGS]
    if bad:
        raise FilterError("has", f"unknown flag {bad[0]!r}; one of: {', '.join(HAS_FLAGS)}")
    return Filters(
        start=start,
        end=end,
        agents=_list(params, "agent"),
        releases=_list(params, "release"),
        models=_list(params, "model"),
        kinds=kinds,
        run_ids=_list(params, "run_id"),
        session_ids=_list(params, "session_id"),
        has=has,
    )


# --- applying Filters ------------------------------------------------------------------------
# Within one parameter a comma list means "any of" (agent=a,b is agent a or agent b), `has`
# included: has=swap,error keeps what has a swap or an error. Parameters combine with AND.
# Times are half-open: from <= ts < to.


def filter_records(queryset: QuerySet, filters: Filters) -> QuerySet:
    """Apply `filters` to a Record queryset, on the facet columns stored at ingest."""
    if filters.start:
        queryset = queryset.filter(ts__gte=filters.start)
    if filters.end:
        queryset = queryset.filter(ts__lt=filters.end)
    if filters.models:
        queryset = queryset.filter(_names_model(filters.models))
    for column, values in (
        ("agent", filters.agents),
        ("release", filters.releases),
        ("kind", filters.kinds),
        ("run_id", filters.run_ids),
        ("session_id", filters.session_ids),
    ):
        if values:
            queryset = queryset.filter(**{f"{column}__in": values})
    if filters.has:
        queryset = queryset.filter(_any_true(HAS_FLAGS[flag] for flag in filters.has))
    return queryset


def filter_runs(queryset: QuerySet, filters: Filters) -> QuerySet:
    """Apply `filters` to a Run queryset.

    A run matches a time range it overlaps (first_ts < to and last_ts >= from). The time span
    and the summary that `model`, `kind` and `has` read are kept by the workers' catch-up pass
    (records.catchup.passes), so a run's newest records count there a few seconds after ingest.
    A run matches `release` when one of its records names one of those releases: the run keeps
    no release of its own, so this reads its records (along record_run_ts), from ingest on.
    """
    if filters.start:
        queryset = queryset.filter(last_ts__gte=filters.start)
    if filters.end:
        queryset = queryset.filter(first_ts__lt=filters.end)
    for column, values in (
        ("agent", filters.agents),
        ("run_id", filters.run_ids),
        ("session_id", filters.session_ids),
    ):
        if values:
            queryset = queryset.filter(**{f"{column}__in": values})
    if filters.releases:
        queryset = queryset.filter(
            Exists(
                Record.objects.filter(
                    project=OuterRef("project"),
                    run_id=OuterRef("run_id"),
                    release__in=filters.releases,
                )
            )
        )
    if filters.models:
        queryset = queryset.filter(models_seen__has_any_keys=filters.models)
    if filters.kinds:
        queryset = queryset.filter(kind_counts__has_any_keys=filters.kinds)
    if filters.has:
        queryset = queryset.filter(_any_true(_RUN_FLAGS[flag] for flag in filters.has))
    return queryset


def _names_model(models: list[str]) -> Q:
    """A record matches `model` when any of its model fields names it: `model` (the
    metric's model) or `named_models` (records.contract.normalise.named_models, "|a|b|")."""
    condition = Q(model__in=models)
    for name in models:
        condition |= Q(named_models__contains=f"|{rollup_keys.escape(name)}|")
    return condition


def _any_true(columns: Iterable[str]) -> Q:
    condition = Q()
    for column in columns:
        condition |= Q(**{column: True})
    return condition

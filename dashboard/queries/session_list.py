"""The sessions pages' reads (dashboard.views.sessions): a keyset page of sessions, their
counters and tokens, and a session's runs.

There is no session table: a session is its runs, and the run summaries (records.models.Run)
hold every counter but tokens. The list is the sessions in order of their latest run, found by
walking the runs newest first (index run_recent) and keeping each session the first time it
appears; a page link carries the position (last_ts, id) of the latest run of its last
session, and the next page skips the sessions that have a run before that position (index
run_session, one query per batch of runs walked). So a page costs what its sessions cost,
never a GROUP BY over every run of the project, and the plan needs no table statistics.

The page's sessions are then added up in one grouped query over their runs (index run_session);
tokens, which the run summaries do not keep, are summed from those runs' records (index
record_run_ts) while the page's runs hold at most TOKEN_RECORDS records; a page over that says
so rather than read more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connections
from django.db.models import BigIntegerField, Count, Max, Min, Q, QuerySet, Sum
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce
from django.urls import reverse
from django.utils.timezone import localtime

from dashboard.formatting import duration_ms, unpriced_cost
from dashboard.queries.run_list import COUNT_COLUMNS, TIME
from records.contract.cursor import decode_cursor, encode_cursor
from records.models import Record, Run

PAGE_SIZE = 50
BATCH = 500  # runs walked per query
FIRST_SLICE = timedelta(hours=1)  # the first slice of last_ts a page walks
MAX_WALK = 20_000  # runs walked for one page at most; the page then ends early, with a link on
TOKEN_RECORDS = 50_000  # records read to sum a page's tokens at most
SESSION_RUNS = 500  # runs listed on the page of a session
FLAGS = ("swap", "fallback", "error", "contract_break", "violation")


def considered_runs(
    project_id: int, oldest: datetime | None, newest: datetime | None, agents: list[str]
) -> QuerySet:
    """The runs the list considers: the project's, by `agents` when any, with last_ts in
    [oldest, newest) (either bound open when None)."""
    runs = Run.objects.filter(project_id=project_id)
    if oldest:
        runs = runs.filter(last_ts__gte=oldest)
    if newest:
        runs = runs.filter(last_ts__lt=newest)
    if agents:
        runs = runs.filter(agent__in=agents)
    return runs


def latest_session_runs(project_id: int, session_id: str, limit: int = SESSION_RUNS) -> list[Run]:
    """The session's latest `limit` runs, newest last record first."""
    runs = Run.objects.filter(project_id=project_id, session_id=session_id)
    return list(runs.order_by("-last_ts", "-id")[:limit])


def _after(position: tuple[datetime, int]) -> Q:
    """Runs after `position` in newest-first order."""
    ts, pk = position
    return Q(last_ts__lt=ts) | Q(last_ts=ts, id__lt=pk)


def _up_to(position: tuple[datetime, int]) -> Q:
    """Runs at or before `position` in newest-first order: the run a page link points at was
    read by the page before it (the newest run of its last session, or the last run it walked),
    so that run's session was on that page or an earlier one."""
    ts, pk = position
    return Q(last_ts__gt=ts) | Q(last_ts=ts, id__gte=pk)


def page_of_sessions(
    runs: QuerySet,
    cursor: str | None,
    size: int = PAGE_SIZE,
    *,
    newest: datetime | None = None,
    oldest: datetime,
    batch_size: int = BATCH,
    first_slice: timedelta = FIRST_SLICE,
    max_walk: int = MAX_WALK,
) -> tuple[list[str], str | None]:
    """The session ids of one page, newest latest run first, and the next page's cursor.

    `runs` are the runs the list considers (project, agent, and last_ts in [oldest, newest)):
    a session is on the page of its newest such run. The walk goes back to `oldest` at most
    (the range's start, or the earliest time the pages take for an open one). A cursor this
    list did not write raises records.contract.cursor.CursorError. `batch_size`, `first_slice`
    and `max_walk` bound the walk (BATCH, FIRST_SLICE, MAX_WALK).

    The walk reads runs in slices of last_ts (an hour first, wider after a sparse one; over a
    gap it jumps to the newest run below it), each a range of index run_recent: without table
    statistics PostgreSQL plans "the project's runs newest first, LIMIT n" as a bitmap scan
    and sort of every run of the project, which a slice bounds to the runs inside it.
    """
    runs = runs.filter(session_id__isnull=False)
    ordered = runs.order_by("-last_ts", "-id").values_list("session_id", "last_ts", "id")
    start = tuple(decode_cursor(cursor, (datetime, int))) if cursor else None
    floor = oldest
    upper = start or _newest_below(runs, newest)
    width = first_slice
    found: list[tuple[str, datetime, int]] = []
    seen: set[str] = set()
    walked = 0
    while upper is not None and len(found) <= size and walked < max_walk:
        low = max(upper[0] - width, floor)
        batch = list(ordered.filter(_after(upper), last_ts__gte=low)[:batch_size])
        walked += len(batch)
        fresh = []
        for session_id, ts, pk in batch:
            if session_id not in seen:
                seen.add(session_id)
                fresh.append((session_id, ts, pk))
        while fresh and len(found) <= size:
            # As many as the page still wants: a session with a run at or before this page's
            # start was on an earlier page (one probe per session; most sessions are new).
            chunk, fresh = fresh[: size + 1 - len(found)], fresh[size + 1 - len(found) :]
            if start is not None:
                earlier = {
                    s for s, _ in _per_session(
                        runs.filter(_up_to(start)), [f[0] for f in chunk], n=Count("id")
                    )
                }  # fmt: skip
                chunk = [f for f in chunk if f[0] not in earlier]
            found += chunk
        if len(batch) == batch_size:
            upper = (batch[-1][1], batch[-1][2])
        elif batch:  # the slice is read to its end: on to the next, wider as it was sparse
            upper = (low, 0) if low > floor else None
            width *= 2
        else:  # nothing in it: jump to the newest run below it
            upper = _newest_below(runs, low) if low > floor else None
    if len(found) > size:
        last = found[size - 1]
        return [s for s, _, _ in found[:size]], encode_cursor([last[1], last[2]])
    if walked >= max_walk and upper is not None:
        # Walked the most a page may: the next page goes on from where this walk stopped.
        return [s for s, _, _ in found], encode_cursor(upper)
    return [s for s, _, _ in found], None


def _newest_below(runs: QuerySet, bound: datetime | None) -> tuple[datetime, int] | None:
    """The position just above the newest run before `bound` (any, when None), or None.

    A MAX over index run_recent: PostgreSQL reads it as one step down the index, statistics
    or none."""
    if bound is not None:
        runs = runs.filter(last_ts__lt=bound)
    newest = runs.aggregate(newest=Max("last_ts"))["newest"]
    return None if newest is None else (newest + timedelta(microseconds=1), 0)


def _per_session(runs: QuerySet, session_ids: list[str], /, **aggregates) -> list[tuple]:
    """(session_id, *aggregates) of `runs` per session, as one UNION ALL of one grouped
    query per session: each branch is an equality on (project, session_id), which PostgreSQL
    plans on index run_session with or without statistics (an IN list of fifty it may plan as
    a scan of every run of the project when it has none)."""
    branch = runs.filter(session_id=_MARK).values_list("session_id").annotate(**aggregates)
    return _each_session(branch.order_by(), session_ids)


_MARK = "\x1fsession\x1f"  # where a branch's session id goes (never sent to the database)


def _each_session(branch: QuerySet, session_ids: list[str]) -> list[tuple]:
    """The rows of `branch` (filtered on session_id=_MARK) for each session id, as one
    UNION ALL. The branch is compiled once and its SQL repeated: the ORM's own union compiles
    every branch, each of the counters' fifty, which was most of a page (bench/pages.py)."""
    if not session_ids:
        return []
    compiler = branch.query.get_compiler(using=branch.db)
    sql, params = compiler.as_sql()
    (at,) = [i for i, value in enumerate(params) if value == _MARK]
    # The branch's own database: a replica when the request reads one (config.replicas).
    database = connections[branch.db]
    one = f"({sql})" if database.features.supports_parentheses_in_compound else sql
    values: list = []
    for session_id in session_ids:
        values += [*params[:at], session_id, *params[at + 1 :]]
    with database.cursor() as cursor:
        cursor.execute(" UNION ALL ".join([one] * len(session_ids)), values)
        rows = cursor.fetchall()
    # What the ORM does to each row (datetimes from SQLite's text, for one).
    converters = compiler.get_converters([expression for expression, _, _ in compiler.select])
    return list(compiler.apply_converters(rows, converters)) if converters else rows


def _kind_sum(kind: str):
    return Coalesce(
        Sum(Cast(KeyTextTransform(kind, "kind_counts"), BigIntegerField())), 0,
        output_field=BigIntegerField(),
    )  # fmt: skip


_KINDS = sorted({k for _, ks in COUNT_COLUMNS for k in ks})


def session_counters(project_id: int, session_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Per session: runs, records, first and last record, agents, runs with each flag and
    the kinds of the run list's count columns, over all its runs. One query (_per_session)."""
    aggregates = {
        "runs": Count("id"),
        "records": Sum("record_count"),
        "first": Min("first_ts"),
        "last": Max("last_ts"),
        "agents": Count("agent", distinct=True),
        "cost_nano": Sum("cost_nano"),
        "cost_unknown": Sum("cost_unknown"),
        **{f"flag_{f}": Count("id", filter=Q(**{f"has_{f}": True})) for f in FLAGS},
        **{f"kind_{i}": _kind_sum(k) for i, k in enumerate(_KINDS)},
    }
    runs = Run.objects.filter(project_id=project_id)
    out = {}
    for values in _per_session(runs, session_ids, **aggregates):
        row = dict(zip(("session_id", *aggregates), values, strict=True))
        kinds = {k: row[f"kind_{i}"] for i, k in enumerate(_KINDS)}
        row["counts"] = [sum(kinds[k] for k in ks) for _, ks in COUNT_COLUMNS]
        row["flags"] = {f: row[f"flag_{f}"] for f in FLAGS}
        out[row["session_id"]] = row
    return out


def run_tokens(project_id: int, runs: list[tuple[str, int]]) -> dict[str, tuple[int, int]] | None:
    """(tokens in, tokens out) per run id, summed from the runs' records; None when the runs
    hold more than TOKEN_RECORDS records (the run summaries keep no tokens)."""
    if sum(n for _, n in runs) > TOKEN_RECORDS:
        return None
    ids = [run_id for run_id, n in runs if n]
    out: dict[str, tuple[int, int]] = {}
    for start in range(0, len(ids), 1000):
        rows = (
            Record.objects.filter(project_id=project_id, run_id__in=ids[start : start + 1000])
            .values_list("run_id")
            .annotate(t_in=Coalesce(Sum("tokens_in"), 0), t_out=Coalesce(Sum("tokens_out"), 0))
            .order_by()
        )
        out.update({run_id: (t_in, t_out) for run_id, t_in, t_out in rows})
    return out


def session_tokens(project_id: int, session_ids: list[str]) -> dict[str, tuple[int, int]] | None:
    branch = Run.objects.filter(project_id=project_id, session_id=_MARK).values_list(
        "session_id", "run_id", "record_count"
    )
    runs = _each_session(branch.order_by(), session_ids)
    per_run = run_tokens(project_id, [(r, n) for _, r, n in runs])
    if per_run is None:
        return None
    out: dict[str, tuple[int, int]] = {}
    for session_id, run_id, _ in runs:
        t_in, t_out = per_run.get(run_id, (0, 0))
        have = out.get(session_id, (0, 0))
        out[session_id] = (have[0] + t_in, have[1] + t_out)
    return out


@dataclass
class SessionRow:
    session_id: str
    url: str
    runs: int
    records: int
    first: str
    last: str
    duration: str
    agents: int
    counts: list[int]
    flags: list[tuple[str, str, int]] = field(default_factory=list)
    tokens: tuple[int, int] | None = None
    cost: str = "—"


def session_row(session_id: str, c: dict, tokens: tuple[int, int] | None) -> SessionRow:
    return SessionRow(
        session_id=session_id,
        url=reverse("dash-session", args=[session_id]),
        runs=c["runs"],
        records=c["records"] or 0,
        first=localtime(c["first"]).strftime(TIME),
        last=localtime(c["last"]).strftime(TIME),
        duration=duration_ms((c["last"] - c["first"]).total_seconds() * 1000),
        agents=c["agents"],
        counts=c["counts"],
        flags=[(f, f.replace("_", " "), n) for f, n in c["flags"].items() if n],
        tokens=tokens,
        # The sum of its runs' spend, which the run summaries keep.
        cost=unpriced_cost(c["cost_nano"] or 0, c["cost_unknown"] or 0),
    )

"""One pass's records aggregated in memory (rollup cells, run deltas, verdicts, attempts,
notices) before the pass writes anything."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime

import orjson

from records.catchup import tool_funnel
from records.catchup.cells import Cell
from records.contract import rollup_keys
from records.contract.buckets import BUCKET_MEMO, bucket_of, minute_of, truncate
from records.contract.derive import NOTICE_REPEATED, ONCE_PER_RUN_NOTICES
from records.contract.fallback_causes import ladder_cause
from records.contract.rollup_keys import (
    CLASSIFICATION,
    MODEL_CALL,
    NOTICE,
    OUTCOME,
    PICK,
    PICK_LATENCY,
    PICKS,
    TOOL_DEFINITIONS,
    TURN,
    VERDICT,
    VIOLATION,
)
from records.models import (
    Grain,
)

GRAINS = (Grain.MINUTE, Grain.HOUR, Grain.DAY)


FIELDS = (
    "id", "project_id", "kind", "agent", "model", "rollup_key", "ts", "latency_ms", "tokens_in",
    "tokens_out", "run_id", "record_key", "outcome", "named_models", "is_swap", "is_fallback",
    "is_error", "is_contract_break", "has_violation", "cost_nano", "cost_source", "release",
)  # fmt: skip


FLAGS = ("swap", "fallback", "error", "contract_break", "violation")


# Read from the JSON only where present: a verdict's toolCallId (its classification), the violation
# codes of a flagged record, and for records.catchup.tool_funnel the iteration and JSON of picks and
# outcomes (their data) and turns (their derived fields); for a model call that reports toolsCount,
# "toolsCount,messagesCount,cacheRead,cacheWrite" (empty where absent: its TOOL_DEFINITIONS row);
# for a verdict, its `cause` (why the seat was unavailable: the ladder fallback's cause).
def json_fields(store) -> tuple[str, ...]:
    """Those columns, in the SQL of `store` (a records.store.backends backend)."""
    text, value, whole = store.json_text, store.json_value, store.json_as_text
    return (
        f"CASE WHEN kind = '{VERDICT}' THEN {text('data', 'toolCallId')} END",
        f"CASE WHEN has_violation THEN {value('derived', 'violations')} END",
        "iteration",
        f"CASE WHEN kind = '{TURN}' THEN {whole('derived')} "
        f"WHEN kind IN ('{PICK}', '{OUTCOME}') THEN {whole('data')} "
        f"WHEN kind = '{MODEL_CALL}' AND {text('data', 'toolsCount')} IS NOT NULL THEN "
        f"{text('data', 'toolsCount')} || ',' || "
        f"coalesce({text('data', 'messagesCount')}, '') || ',' || "
        f"coalesce({text('data', 'usage', 'cacheRead')}, '') || ',' || "
        f"coalesce({text('data', 'usage', 'cacheWrite')}, '') "
        f"WHEN kind = '{VERDICT}' THEN {text('data', 'cause')} END",
    )


# The row Batch.add unpacks, column by column in the order the pass reads them (FIELDS, then the
# json_fields), each with the name add gives it: tests/records/catchup/test_rollups.py holds add
# to this order, so a column added to FIELDS cannot shift the names of those after it unnoticed.
ROW_NAMES = (
    ("id", "record_id"), ("project_id", "project"), ("kind", "kind"), ("agent", "agent"),
    ("model", "model"), ("rollup_key", "key"), ("ts", "ts"), ("latency_ms", "latency"),
    ("tokens_in", "t_in"), ("tokens_out", "t_out"), ("run_id", "run_id"),
    ("record_key", "record_key"), ("outcome", "outcome"), ("named_models", "named"),
    ("is_swap", "swap"), ("is_fallback", "fallback"), ("is_error", "error"),
    ("is_contract_break", "contract_break"), ("has_violation", "violation"),
    ("cost_nano", "cost_nano"), ("cost_source", "cost_source"), ("release", "release"),
    ("a verdict's toolCallId", "tool_call_id"), ("the violation codes", "violations"),
    ("iteration", "iteration"), ("a decision's JSON or a verdict's cause", "body"),
)  # fmt: skip


@dataclass
class _RunDelta:
    kinds: Counter = field(default_factory=Counter)
    models: Counter = field(default_factory=Counter)
    flags: set = field(default_factory=set)
    first_ts: datetime | None = None
    last_ts: datetime | None = None
    agent: str | None = None  # the greatest agent of the pass's records of the run
    release: str | None = None  # and the greatest release
    cost_nano: int = 0
    cost_unknown: int = 0  # records with usage and no known price


class Batch:
    """Everything one pass adds, aggregated in memory before it touches the database."""

    def __init__(self) -> None:
        # minute grain: (project, minute, kind, agent, model, key, release) -> its sums
        self.cells: dict[tuple, Cell] = defaultdict(Cell)
        self.runs: dict[tuple[int, str], _RunDelta] = defaultdict(_RunDelta)
        # (project, model, minute) -> [(verdict class, ts, record key)]
        self.verdicts: dict[tuple, list[tuple]] = defaultdict(list)
        # (project, run_id, toolCallId) -> [(attempt, ts, record key, seat model, agent, release,
        # ladder cause)]: records.catchup.upserts.merge_classifications
        self.attempts: dict[tuple, list[tuple]] = defaultdict(list)
        # (project, run_id, code) -> [(id, minute, agent, model, release)] of once-per-run notices
        self.once_notices: dict[tuple, list[tuple]] = defaultdict(list)
        # records.catchup.tool_funnel: the hourly tool cells, the picks' tool tallies, and (project,
        # run_id, iteration) -> [the earliest pick, the earliest outcome] of this pass's decisions
        self.tool_hourly: dict[tuple, Cell] = defaultdict(Cell)
        # the picks' TOOL rows (records.catchup.tool_funnel)
        self.tool_tallies: dict[tuple, dict] = {}
        self.tool_sides: dict[tuple, list] = defaultdict(lambda: [None, None])
        # TOOL_DEFINITIONS: the hourly cells of the model calls that report toolsCount
        self.definition_hourly: dict[tuple, Cell] = defaultdict(Cell)
        # (project, run_id) of the runs that earlier passes folded records of: only those can
        # have stored state to read (runs_folded_before)
        self.runs_folded_before: set[tuple[int, str]] = set()

    def add(self, row: tuple) -> None:
        (record_id, project, kind, agent, model, key, ts, latency, t_in, t_out, run_id,
         record_key, outcome, named, swap, fallback, error, contract_break, violation,
         cost_nano, cost_source, release, tool_call_id, violations, iteration,
         body) = row  # fmt: skip
        # Per record, so written for speed: a pass calls this 100,000 times.
        minute = BUCKET_MEMO.get((ts.minute, ts.hour, ts.day, ts.month, ts.year)) or minute_of(ts)
        release = release or ""
        cell = self.cells[(project, minute, kind, agent or "", model or "", key, release)]
        cell.count += 1
        if t_in:
            cell.tokens_in += t_in
        if t_out:
            cell.tokens_out += t_out
        if cost_source is not None:  # the record had usage (records.contract.cost)
            cell.add_cost(cost_nano)
        if latency is not None:
            if kind in PICKS:  # into its classifier model's PICK_LATENCY cell, not its own
                merged = self.cells[
                    (project, minute, PICK_LATENCY, agent or "", model or "", "", release)
                ]
                merged.count += 1
                merged.add_latency(latency)
            else:
                cell.add_latency(latency)
        run = self.runs[(project, run_id)]
        if run.first_ts is None:
            run.first_ts = run.last_ts = ts
        elif ts < run.first_ts:
            run.first_ts = ts
        elif ts > run.last_ts:
            run.last_ts = ts
        if agent and (run.agent is None or agent > run.agent):
            run.agent = agent
        if release and (run.release is None or release > run.release):
            run.release = release
        run.kinds[kind] += 1
        if cost_source is not None:
            if cost_nano is None:
                run.cost_unknown += 1
            else:
                run.cost_nano += cost_nano
        if named:
            for name in _NAMED.get(named) or models_named(model, named):
                run.models[name] += 1
        elif model:
            run.models[model] += 1
        if swap or fallback or error or contract_break or violation:
            flags = (swap, fallback, error, contract_break, violation)
            run.flags.update(name for name, on in zip(FLAGS, flags, strict=True) if on)
        if violations:
            if isinstance(violations, str):  # SQLite hands JSON over as text
                violations = orjson.loads(violations)
            if kind == NOTICE:
                # A pass decides repeated notices itself (flag_repeated_notices): a replay of
                # a notice it flagged before (a rebuild) must not count that code twice.
                violations = [code for code in violations if code != NOTICE_REPEATED]
            if violations:
                self.add_violations(project, minute, kind, agent, model, violations, release)
        if kind in tool_funnel.KINDS:
            tool_funnel.add(self, project, kind, agent, model, ts, run_id, record_key, iteration,
                      latency, error, body, release)  # fmt: skip
        elif kind == VERDICT and model:
            self.verdicts[(project, model, minute)].append((outcome, ts, record_key))
            fields = _DECODED.get((VERDICT, key)) or _decoded(VERDICT, key)
            if tool_call_id:
                cause = ladder_cause(fields["verdict"], body)
                self.attempts[(project, run_id, tool_call_id)].append(
                    (fields["attempt"], ts, record_key, fields["seat"], agent or "", release, cause)
                )
        elif kind == MODEL_CALL:
            if body:
                self.add_definition_call(project, minute, agent, model, key, t_in, body, release)
        elif kind == NOTICE:
            code = (_DECODED.get((NOTICE, key)) or _decoded(NOTICE, key))["code"]
            if code in ONCE_PER_RUN_NOTICES:
                self.once_notices[(project, run_id, code)].append(
                    (record_id, minute, agent or "", model or "", release)
                )

    def add_definition_call(
        self, project, minute, agent, model, key, t_in, body: str, release: str = ""
    ) -> None:
        """A model call that reports toolsCount into its hour's TOOL_DEFINITIONS cell: one call,
        its prompt tokens (input, cached read and written) and their square. `key` is the call's
        MODEL_CALL key, its provider escaped as TOOL_DEFINITIONS' first field; the counts are
        digits (or "")."""
        tools, messages, cache_read, cache_write = body.split(",")
        prompt = (t_in or 0) + int(cache_read or 0) + int(cache_write or 0)
        hour = minute.replace(minute=0)
        cell = self.definition_hourly[
            (project, hour, TOOL_DEFINITIONS, agent or "", model or "",
             f"{key}|{tools}|{messages}", release)
        ]  # fmt: skip
        cell.count += 1
        cell.tokens_in += prompt
        # A float: the squares only weigh the estimate's error (its slope is the integer sums').
        cell.latency_sum += float(prompt * prompt)

    def add_violations(self, project, minute, kind, agent, model, codes, release="") -> None:
        """One VIOLATION row per code, and one with code "" per violating record."""
        for code in ("", *codes):
            key = rollup_keys.encode(VIOLATION, {"kind": kind, "code": code})
            self.cells[
                (project, minute, VIOLATION, agent or "", model or "", key, release)
            ].count += 1

    def add_classification(self, project, state: tuple | None, delta: int) -> None:
        """Add (or take back) a classification's one count in its first rung-0 minute."""
        if state is None or state[0] is None:
            return  # no rung-0 attempt yet: not counted anywhere
        first_ts, _, seat, agent, release, fell_back, _, _, cause = state
        key = rollup_keys.encode(
            CLASSIFICATION, {"fell_back": int(fell_back), "cause": cause if fell_back else ""}
        )
        minute = truncate(first_ts, Grain.MINUTE)
        self.cells[(project, minute, CLASSIFICATION, agent, seat, key, release)].count += delta

    def grains(self) -> dict[str, dict[tuple, Cell]]:
        """The minute cells, and the same merged into hours and days."""
        out = {Grain.MINUTE: self.cells}
        for grain in (Grain.HOUR, Grain.DAY):
            merged: dict[tuple, Cell] = defaultdict(Cell)
            for (project, bucket, *rest), cell in self.cells.items():
                merged[(project, bucket_of(bucket, grain), *rest)].merge(cell)
            out[grain] = merged
        return out


def models_named(model: str | None, named: str | None) -> list[str]:
    if named:
        if len(_NAMED) > 10_000:
            _NAMED.clear()
        models = _NAMED[named] = [rollup_keys.unescape(n) for n in named.strip("|").split("|")]
        return models
    return [model] if model else []


# The pass's memos of what it parses again and again: the few model lists records name, and
# the rollup keys of verdicts and notices (read only: shared by every record of the key).
_NAMED: dict[str, list[str]] = {}


_DECODED: dict[tuple[str, str], dict[str, str]] = {}


def _decoded(kind: str, key: str) -> dict[str, str]:
    """rollup_keys.decode(kind, key), memoised."""
    if len(_DECODED) > 10_000:
        _DECODED.clear()
    fields = _DECODED[(kind, key)] = rollup_keys.decode(kind, key)
    return fields

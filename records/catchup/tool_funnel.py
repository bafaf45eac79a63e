"""The tool funnel, selection accuracy and the narrowing what-if, kept by the catch-up pass.

The catch-up pass (records.catchup.passes) reads the JSON of the picks, outcomes and turns it folds
in its one read of the records and hands each to `add`, which adds its hourly cells and keeps its
side of a decision; `fold`, once per pass inside its transaction, merges the decisions with the
stored ToolDecision and ToolMiss state, adds the minute cells to the pass's batch and upserts the
hourly ones (with the pass's own statement). The state is merged set-based per pass like
records.models.Classification: each changed decision takes back what its old state held and adds
what its new one holds, so any arrival order (an outcome before its pick, an earlier re-filed pick
after a later one) ends with the rollups of in-order arrival. Nothing here is read at page time: the
pages read the rollup rows through records.metrics.reader.

Definitions, where the metrics leave a choice open:

- A *tool decision* is one (run_id, iteration): the `tool_choice.pick` of that iteration joined
  with the `tool_choice.outcome` of the same run and iteration, "what the model then called".
  Turns carry no iteration, so *called* is the outcome's `called`; turns feed only
  the per-call rows (TOOL_CALL: calls, invented names, errors, latency).
- A duplicate pick or outcome of one iteration (a re-filed record): the earliest by (ts, record
  key) counts, whichever arrives first. A pick error has no ranking and joins nothing.
- *Chosen by the classifier* is the pick's top-ranked tool (`ranked[0]`): the tool `firstAgrees`
  compares the first call with. *Narrowed out* is offered and not served.
- A *miss* ("wanted but narrowed out") of a tool: the outcome called it or named it in
  `miss.wanted`, and its pick offered it without serving it.
- *Agreement* is the outcome's `firstAgrees` (decisions without it are left out of agreement and
  calibration, as the metrics leave them out of first-pick agreement); *chosen-vs-called* is
  whether the top-ranked tool is among the called ones.
- Narrowing to the *top N* serves the first N offered names of `ranked` (fewer when fewer were
  ranked) plus the doors, and the full set once N reaches the number offered (agentfootprint's
  "too-few"). A decision *needs* N when that is the smallest N serving every offered tool it
  called (0 when it called none that was offered: no N misses it); an offered tool the
  classifier did not rank needs the full set. Only decisions count in the what-if (a pick
  without an outcome has nothing called to miss).
- Per-tool errors and latency come from turns (a turn's executionError and durationMs, for each
  tool it called): model calls name no tool, and outcomes carry neither.

Rows (records.contract.rollup_keys), in the bucket of their record, or for a decision of its pick.
Only the SELECTION_LINK rows (the alertable metrics) are kept per minute; the others, page-only and
many (a row per tool), per hour and day: the tools pages read hours where the other pages read
minutes. Per minute they were three quarters of all rollup rows and cut the catch-up's rate by two
thirds.

- TOOL, one per tool a pick names, under its classifier model and agent, key (tool, role,
  ranked, reason): role `served` or `narrowed_out` (an offered tool), `door` (served, not
  offered) or `unoffered` (ranked, not offered); ranked `top` (ranked first: *chosen*), `1`
  (ranked lower) or `0`, with tokens_in = its rank from 1 and latency_sum = its score; reason
  "". A pick whose narrowing was skipped adds one more per offered tool: role `skipped`, reason
  = its narrowedSkipped (a row of its own: split by reason, every row was, and there were twice
  as many). Per outcome, model "", role `called` for each distinct called tool.
  Per turn that names what its call was offered (`offered`: a model call read from a trace, a
  tool decision with no classifier), model "": role `call_offered` for each distinct offered
  tool and `call_called` for each of them the call called. A trace cannot tell the ranked,
  served and chosen stages: they get no row (not reported, never zero).
- TOOL_CALL, per action call of a turn, model "", key (tool, invented, error): the action name,
  whether it was invented, whether the turn had an executionError; the turn's durationMs in
  the latency sketch.
- TOOL_LINK, per decision, key (tool, stage): `called_served`, `called_narrowed_out`,
  `called_not_offered` (each distinct called tool by what its pick did with it), `missed` (each
  missed tool), `chosen_called` (the top-ranked tool, when called).
- SELECTION_LINK, per decision: key (agreement agree|disagree|"", chosen_called 1|0, bin 0..9 of
  the confidence clipped to [0, 1]); tokens_out = the clipped confidence in millionths (integers,
  so that a decision's count moved away leaves exactly nothing behind).
- NARROWING, two per decision whose pick offered tools, key (offered m, side, n): side `need`
  with n = the top-N it needs; side `ranked` with n = the offered tools ranked (what a top-N
  below m would serve at most) and tokens_out = the doors served.

Every row is under the release of the record it comes from, a decision's under its pick's.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

import orjson
from django.db import connection

from records.catchup.cells import Cell
from records.catchup.sql_helpers import rows_by_keys
from records.contract import rollup_keys
from records.contract.buckets import bucket_of, minute_of
from records.contract.rollup_keys import (
    NARROWING,
    OUTCOME,
    PICK,
    SELECTION_LINK,
    TOOL,
    TOOL_CALL,
    TOOL_LINK,
    TURN,
)
from records.models import Grain, ToolDecision, ToolMiss
from records.store.backends import backend

ROLES = ("served", "narrowed_out", "door", "unoffered", "skipped", "called", "call_offered",
         "call_called")  # fmt: skip
LINK_STAGES = ("called_served", "called_narrowed_out", "called_not_offered", "missed",
               "chosen_called")  # fmt: skip
BINS = 10
MICRO = 1_000_000


def confidence_bin(confidence: float) -> tuple[int, int]:
    """(bin 0..BINS-1, confidence clipped to [0, 1] in millionths)."""
    clipped = min(max(confidence, 0.0), 1.0)
    return min(int(clipped * BINS), BINS - 1), round(clipped * MICRO)


def need(offered: list[str], ranked: list[str], called: list[str]) -> int:
    """The smallest top-N that serves every offered tool in `called` (0: none was offered)."""
    rank = {}
    for name in ranked:
        if name in offered and name not in rank:
            rank[name] = len(rank) + 1
    wanted = [rank.get(name, len(offered)) for name in called if name in offered]
    return min(max(wanted, default=0), len(offered))


def _distinct(names) -> list[str]:
    return list(dict.fromkeys(names))


_MINUTES: dict[str, datetime] = {}


def _minute(text: str) -> datetime:
    """The minute of a state's time ("2026-11-20T09:00:30.000000+00:00")."""
    minute = _MINUTES.get(text[:16])
    if minute is None:
        if len(_MINUTES) > 100_000:
            _MINUTES.clear()
        minute = _MINUTES[text[:16]] = datetime.fromisoformat(text[:16]).replace(tzinfo=UTC)
    return minute


def _time(ts: datetime) -> str:
    """A record's ts as a state keeps it: UTC, always with microseconds, so that states sort
    by time as text."""
    if ts.utcoffset():
        ts = ts.astimezone(UTC)
    return ts.isoformat(timespec="microseconds")


# --- per-record rows -----------------------------------------------------------------------------
def _pick_state(ts: datetime, record_key: str, model, agent, data: dict, release: str) -> dict:
    offered = _distinct(data.get("offered") or ())
    return {
        "t": _time(ts),
        "k": record_key,
        "m": model or "",
        "a": agent or "",
        "v": release,
        "o": offered,
        "r": _distinct(t["name"] for t in data.get("ranked") or ()),
        "s": _distinct(data.get("served") or ()),
        "c": float(data.get("confidence") or 0.0),
    }


def _outcome_state(ts: datetime, record_key: str, data: dict) -> dict:
    return {
        "t": _time(ts),
        "k": record_key,
        "c": _distinct(data.get("called") or ()),
        "f": data.get("firstAgrees"),
        "w": _distinct((data.get("miss") or {}).get("wanted") or ()),
    }


_KEYS: dict[tuple, str] = {}  # (kind, values...) -> encoded key: a few hundred, reused


def _key(kind: str, *values) -> str:
    key = _KEYS.get((kind, *values))
    if key is None:
        names = rollup_keys.KEY_FIELDS[kind]
        key = _KEYS[(kind, *values)] = rollup_keys.encode(
            kind, dict(zip(names, values, strict=True))
        )
        if len(_KEYS) > 100_000:  # tool names are unbounded: keep the cache so
            _KEYS.clear()
    return key


def _add(cells, project, bucket, kind, agent, model, key, n=1, t_in=0, t_out=0, release=""):
    cell = cells[(project, bucket, kind, agent, model, key, release)]
    cell.count += n
    cell.tokens_in += t_in
    cell.tokens_out += t_out
    return cell


def _add_pick(tallies: dict, project, hour, data: dict, state: dict) -> None:
    """Count the TOOL row of each tool the pick names in `tallies` (per pick, so written for
    speed): {(project, hour, agent, model, release): {key values: [count, rank sum, score sum]}}, a
    dozen of tools a pick, turned into cells once per pass by _tallied_cells."""
    offered, served = state["o"], set(state["s"])
    reason = data.get("narrowedSkipped") or ""
    ranks: dict[str, tuple[int, float]] = {}
    for tool in data.get("ranked") or ():
        if tool["name"] not in ranks:
            ranks[tool["name"]] = (len(ranks) + 1, float(tool["score"]))
    offered_set = set(offered)
    names = [*offered, *(n for n in state["s"] if n not in offered_set),
             *(n for n in ranks if n not in offered_set and n not in served)]  # fmt: skip
    prefix = (project, hour, state["a"], state["m"], state["v"])
    tally = tallies.get(prefix)
    if tally is None:
        tally = tallies[prefix] = {}
    for name in names:
        if name in offered_set:
            role = "served" if name in served else "narrowed_out"
            if reason:
                _tally(tally, (name, "skipped", "0", reason), 0, 0.0)
        else:
            role = "door" if name in served else "unoffered"
        rank = ranks.get(name)
        if rank is None:
            _tally(tally, (name, role, "0", ""), 0, 0.0)
        else:
            _tally(tally, (name, role, "top" if rank[0] == 1 else "1", ""), *rank)


def _tally(tally: dict, values: tuple, rank: int, score: float) -> None:
    counts = tally.get(values)
    if counts is None:
        tally[values] = [1, rank, score]
    else:
        counts[0] += 1
        counts[1] += rank
        counts[2] += score


def _tallied_cells(cells, tallies: dict) -> None:
    """Add the picks' TOOL tallies to the hourly cells: tokens_in the rank, latency_sum the
    score (see the module's docstring)."""
    for (project, hour, agent, model, release), tally in tallies.items():
        for values, (count, ranks, scores) in tally.items():
            cell = cells[(project, hour, TOOL, agent, model, _key(TOOL, *values), release)]
            cell.count += count
            cell.tokens_in += ranks
            cell.latency_sum += scores


def _add_turn(cells, project, hour, agent, latency, is_error, derived: dict, release) -> None:
    offered = derived.get("offered")
    if offered is not None:  # a model call's tool decision, read from a trace
        called = {c.get("action") for c in derived.get("calls") or () if c.get("action")}
        for name in offered:
            _add(cells, project, hour, TOOL, agent, "", _key(TOOL, name, "call_offered", "0", ""),
                 release=release)  # fmt: skip
            if name in called:
                _add(cells, project, hour, TOOL, agent, "",
                     _key(TOOL, name, "call_called", "0", ""), release=release)  # fmt: skip
    for call in derived.get("calls") or ():
        action = call.get("action")
        if action is None:  # a control call (sub-agent, chat, ...): no tool
            continue
        key = _key(
            TOOL_CALL, action, str(int(bool(call.get("invented")))), str(int(bool(is_error)))
        )
        cell = _add(cells, project, hour, TOOL_CALL, agent, "", key, release=release)
        if latency is not None:
            cell.add_latency(latency)


# --- decisions -----------------------------------------------------------------------------------
def contribution(pick: dict | None, outcome: dict | None) -> list[tuple]:
    """The rows one decision holds: [(minute, kind, agent, model, key values, tokens_out,
    release)] (rows of the hourly kinds go to the minute's hour; the pick's release, "" for a
    pick kept before releases were)."""
    if not pick or not outcome:
        return []
    minute, agent, model = _minute(pick["t"]), pick["a"], pick["m"]
    release = pick.get("v", "")
    offered, ranked, served = pick["o"], pick["r"], set(pick["s"])
    offered_set = set(offered)
    called = outcome["c"]
    out = []
    for name in called:
        if name not in offered_set:
            stage = "called_not_offered"
        else:
            stage = "called_served" if name in served else "called_narrowed_out"
        out.append((TOOL_LINK, (name, stage), 0))
    for name in _distinct([*called, *outcome["w"]]):
        if name in offered_set and name not in served:
            out.append((TOOL_LINK, (name, "missed"), 0))
    top = ranked[0] if ranked else None
    chosen_called = top is not None and top in called
    if chosen_called:
        out.append((TOOL_LINK, (top, "chosen_called"), 0))
    agreement = {True: "agree", False: "disagree"}.get(outcome["f"], "")
    bin_, micro = confidence_bin(pick["c"])
    out.append((SELECTION_LINK, (agreement, str(int(chosen_called)), str(bin_)), micro))
    if offered:
        m = len(offered)
        doors = sum(1 for name in pick["s"] if name not in offered_set)
        ranked_offered = sum(1 for name in ranked if name in offered_set)
        out.append((NARROWING, (str(m), "need", str(need(offered, ranked, called))), 0))
        out.append((NARROWING, (str(m), "ranked", str(ranked_offered)), doors))
    return [(minute, kind, agent, model, values, t_out, release) for kind, values, t_out in out]


def _move(batch, hourly, misses: dict, key: tuple, pick, outcome, sign: int) -> None:
    project, run_id, _ = key
    for minute, kind, agent, model, values, t_out, release in contribution(pick, outcome):
        if kind == SELECTION_LINK:
            cells, bucket = batch.cells, minute
        else:
            cells, bucket = hourly, minute.replace(minute=0)
        _add(cells, project, bucket, kind, agent, model, _key(kind, *values), n=sign,
             t_out=sign * t_out, release=release)  # fmt: skip
        if kind == TOOL_LINK and values[1] == "missed":
            misses[(project, values[0], run_id)] += sign


def _earliest(a: dict | None, b: dict | None) -> dict | None:
    if a is None or b is None:
        return a or b
    return a if (a["t"], a["k"]) <= (b["t"], b["k"]) else b


KINDS = frozenset({PICK, OUTCOME, TURN})


def add(batch, project, kind, agent, model, ts, run_id, record_key, iteration, latency, is_error,
        text, release="") -> None:  # fmt: skip
    """Fold one pick, outcome or turn of the pass into `batch` (a records.catchup.batch.Batch): its
    hourly cells at once, its side of a decision kept for `fold`. Called by _Batch.add for
    the records of KINDS, with the JSON the pass reads for them (a turn's derived fields, a
    pick's or outcome's data)."""
    hourly = batch.tool_hourly
    hour = bucket_of(minute_of(ts), Grain.HOUR)
    body = orjson.loads(text) if text else {}
    if kind == TURN:
        _add_turn(hourly, project, hour, agent or "", latency, is_error, body, release)
    elif kind == PICK:
        state = _pick_state(ts, record_key, model, agent, body, release)
        _add_pick(batch.tool_tallies, project, hour, body, state)
        side = batch.tool_sides[(project, run_id, iteration)]
        side[0] = _earliest(side[0], state)
    elif kind == OUTCOME:
        state = _outcome_state(ts, record_key, body)
        for name in state["c"]:
            _add(hourly, project, hour, TOOL, agent or "", "",
                 _key(TOOL, name, "called", "0", ""), release=release)  # fmt: skip
        side = batch.tool_sides[(project, run_id, iteration)]
        side[1] = _earliest(side[1], state)


def fold(batch) -> HourlyCells | None:
    """Merge the pass's decisions with the stored ToolDecision state (one read, one upsert);
    returns the hourly cells (and their days) for the pass to write as it writes its own, so
    that counts add and cells taken back to zero go (None: none)."""
    if batch.tool_sides:
        _fold_decisions(batch, batch.tool_hourly, batch.tool_sides)
    _tallied_cells(batch.tool_hourly, batch.tool_tallies)
    return HourlyCells(batch.tool_hourly) if batch.tool_hourly else None


def _fold_decisions(batch, hourly, sides: dict) -> None:
    known = batch.runs_folded_before  # only their decisions can be stored (records.catchup.passes)
    stored = _stored([key for key in sides if key[:2] in known])
    changed = []
    misses: dict[tuple, int] = defaultdict(int)  # (project, tool, run_id) -> change
    for key, (pick, outcome) in sides.items():
        before_pick, before_outcome = stored.get(key, (None, None))
        after_pick = _earliest(before_pick, pick)
        after_outcome = _earliest(before_outcome, outcome)
        if after_pick is before_pick and after_outcome is before_outcome:
            continue
        _move(batch, hourly, misses, key, before_pick, before_outcome, -1)
        _move(batch, hourly, misses, key, after_pick, after_outcome, +1)
        changed.append((*key, _text(after_pick), _text(after_outcome)))
    _save(changed)
    _save_misses(sorted((*key, n) for key, n in misses.items() if n))


class HourlyCells:
    """The hourly cells in the shape records.catchup.upserts.merge_rollups writes: hours and
    days."""

    def __init__(self, cells: dict) -> None:
        self.cells = cells

    def grains(self) -> dict:
        days: dict[tuple, Cell] = defaultdict(Cell)
        for (project, bucket, *rest), cell in self.cells.items():
            days[(project, bucket_of(bucket, Grain.DAY), *rest)].merge(cell)
        return {Grain.HOUR: self.cells, Grain.DAY: days}


def _text(state: dict | None) -> str:
    return orjson.dumps(state).decode() if state else ""


_MISS = ToolMiss._meta.db_table


def _save_misses(rows: list[tuple]) -> None:
    """Add (project, tool, run_id, change) to the runs' miss counts; delete those left at 0."""
    if not rows:
        return
    with connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {_MISS} (project_id, tool, run_id, misses) VALUES (%s, %s, %s, %s) "
            f"ON CONFLICT (project_id, tool, run_id) DO UPDATE SET "
            f"misses = {_MISS}.misses + excluded.misses",
            rows,
        )
        taken = [row[:3] for row in rows if row[3] < 0]
        if taken:
            cursor.executemany(
                f"DELETE FROM {_MISS} WHERE project_id = %s AND tool = %s AND run_id = %s "
                "AND misses = 0",
                taken,
            )


_DECISION = ToolDecision._meta.db_table


def _stored(keys_: list[tuple]) -> dict[tuple, tuple]:
    """{(project, run_id, iteration): (pick, outcome)} of the stored decisions, in one query."""

    out: dict[tuple, tuple] = {}
    if not keys_:
        return out
    key_columns = ("project_id", "run_id", "iteration")
    rows = rows_by_keys(_DECISION, key_columns, ("bigint", "text", "int"),
                        (*key_columns, "pick", "outcome"), keys_)  # fmt: skip
    for project, run_id, iteration, pick, outcome in rows:
        out[(project, run_id, iteration)] = (
            orjson.loads(pick) if pick else None,
            orjson.loads(outcome) if outcome else None,
        )
    return out


_STAGE = """
CREATE TEMP TABLE IF NOT EXISTS tool_decision_stage (
    project_id bigint, run_id text, iteration integer, pick text, outcome text
) ON COMMIT DELETE ROWS;
TRUNCATE tool_decision_stage
"""
_COLUMNS = "project_id, run_id, iteration, pick, outcome"
_CONFLICT = (
    "ON CONFLICT (project_id, run_id, iteration) DO UPDATE SET pick = excluded.pick, "
    "outcome = excluded.outcome"
)


def _save(rows: list[tuple]) -> None:
    if not rows:
        return
    with connection.cursor() as cursor:
        backend().upsert_rows(
            cursor, _DECISION, _COLUMNS.split(", "), rows, _CONFLICT,
            stage=(_STAGE, "tool_decision_stage"),
        )  # fmt: skip

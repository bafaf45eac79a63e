"""The tool funnel, selection accuracy and the narrowing what-if, kept by the catch-up pass.

records.rollup.run_pass calls `fold` once per pass, inside its transaction, with the id range it
folds; `fold` reads the picks, outcomes and turns of that range (their JSON, which the main pass
does not read), adds cells to the pass's batch, and keeps the ToolDecision state. Nothing here
is read at page time: the pages read the rollup rows through records.reader.

Definitions, where DESIGN is silent:

- A *tool decision* is one (run_id, iteration): the `tool_choice.pick` of that iteration joined
  with the `tool_choice.outcome` of the same run and iteration, "what the model then called".
  Turns carry no iteration (DESIGN §3), so *called* is the outcome's `called`; turns feed only
  the per-call rows (TOOL_CALL: calls, invented names, errors, latency).
- A duplicate pick or outcome of one iteration (a re-filed record): the earliest by (ts, record
  key) counts, whichever arrives first. A pick error has no ranking and joins nothing.
- *Chosen by the classifier* is the pick's top-ranked tool (`ranked[0]`): the tool `firstAgrees`
  compares the first call with. *Narrowed out* is offered and not served.
- A *miss* ("wanted but narrowed out") of a tool: the outcome called it or named it in
  `miss.wanted`, and its pick offered it without serving it.
- *Agreement* is the outcome's `firstAgrees` (decisions without it are left out of agreement and
  calibration, as DESIGN §4 leaves them out of first-pick agreement); *chosen-vs-called* is
  whether the top-ranked tool is among the called ones.
- Narrowing to the *top N* serves the first N offered names of `ranked` (fewer when fewer were
  ranked) plus the doors, and the full set once N reaches the number offered (agentfootprint's
  "too-few"). A decision *needs* N
  when that is the smallest N serving every offered tool it called (0 when it called none that
  was offered: no N misses it); an offered tool the classifier did not rank needs the full set.

Rows (records.keys), all in the minute of their record, or for a decision of its pick:

- TOOL, per pick, under its classifier model and agent, key (tool, stage, reason): `offered`
  (each distinct offered tool; reason = the pick's narrowedSkipped, "" when narrowing applied or
  was not asked), `ranked` (each distinct ranked name; tokens_in = its rank from 1, latency_sum =
  its score), `served` and `narrowed_out` (each offered tool), `door` (each served tool not
  offered), `chosen` (the top-ranked tool); and per outcome, model "", `called` (each distinct
  called tool).
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
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

import orjson
from django.db import connection

from records import keys
from records.keys import (
    NARROWING,
    OUTCOME,
    PICK,
    SELECTION_LINK,
    TOOL,
    TOOL_CALL,
    TOOL_LINK,
    TURN,
)
from records.models import Record, ToolDecision, ToolMiss

PICK_STAGES = ("offered", "ranked", "served", "narrowed_out", "door", "chosen", "called")
LINK_STAGES = ("called_served", "called_narrowed_out", "called_not_offered", "missed",
               "chosen_called")  # fmt: skip
BINS = 10
MICRO = 1_000_000
_TIME = "%Y-%m-%dT%H:%M:%S.%f"  # sortable as text: every state's times in one format


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


def _minute(text: str) -> datetime:
    return datetime.strptime(text[:16], "%Y-%m-%dT%H:%M").replace(tzinfo=UTC)


# --- per-record rows -----------------------------------------------------------------------------
def _pick_state(ts: datetime, record_key: str, model, agent, data: dict) -> dict:
    offered = _distinct(data.get("offered") or ())
    return {
        "t": ts.astimezone(UTC).strftime(_TIME),
        "k": record_key,
        "m": model or "",
        "a": agent or "",
        "o": offered,
        "r": _distinct(t["name"] for t in data.get("ranked") or ()),
        "s": _distinct(data.get("served") or ()),
        "c": float(data.get("confidence") or 0.0),
    }


def _outcome_state(ts: datetime, record_key: str, data: dict) -> dict:
    return {
        "t": ts.astimezone(UTC).strftime(_TIME),
        "k": record_key,
        "c": _distinct(data.get("called") or ()),
        "f": data.get("firstAgrees"),
        "w": _distinct((data.get("miss") or {}).get("wanted") or ()),
    }


def _add(batch, project, minute, kind, agent, model, values, n=1, t_in=0, t_out=0, value=None):
    cell = batch.cells[(project, minute, kind, agent, model, keys.encode(kind, values))]
    cell.count += n
    cell.tokens_in += t_in
    cell.tokens_out += t_out
    if value is not None:
        cell.latency_sum += value
    return cell


def _add_pick(batch, project, minute, data: dict, state: dict) -> None:
    agent, model = state["a"], state["m"]
    offered, served = state["o"], set(state["s"])
    reason = data.get("narrowedSkipped") or ""
    for name in offered:
        _add(batch, project, minute, TOOL, agent, model,
             {"tool": name, "stage": "offered", "reason": reason})  # fmt: skip
        stage = "served" if name in served else "narrowed_out"
        _add(batch, project, minute, TOOL, agent, model, {"tool": name, "stage": stage})
    seen = set()
    for tool in data.get("ranked") or ():
        if tool["name"] in seen:
            continue
        seen.add(tool["name"])
        _add(batch, project, minute, TOOL, agent, model, {"tool": tool["name"], "stage": "ranked"},
             t_in=len(seen), value=float(tool["score"]))  # fmt: skip
    offered_set = set(offered)
    for name in state["s"]:
        if name not in offered_set:
            _add(batch, project, minute, TOOL, agent, model, {"tool": name, "stage": "door"})
    if state["r"]:
        _add(batch, project, minute, TOOL, agent, model, {"tool": state["r"][0], "stage": "chosen"})


def _add_turn(batch, project, minute, agent, latency, is_error, derived: dict) -> None:
    for call in derived.get("calls") or ():
        action = call.get("action")
        if action is None:  # a control call (sub-agent, chat, ...): no tool
            continue
        values = {"tool": action, "invented": int(bool(call.get("invented"))),
                  "error": int(bool(is_error))}  # fmt: skip
        cell = _add(batch, project, minute, TOOL_CALL, agent, "", values)
        if latency is not None:
            cell.latency_sum += latency
            cell.sketch.add(latency)


# --- decisions -----------------------------------------------------------------------------------
def contribution(pick: dict | None, outcome: dict | None) -> list[tuple]:
    """The rows one decision holds: [(minute, kind, agent, model, key values, tokens_out)]."""
    if not pick or not outcome:
        return []
    minute, agent, model = _minute(pick["t"]), pick["a"], pick["m"]
    offered, ranked, served = pick["o"], pick["r"], set(pick["s"])
    offered_set = set(offered)
    called = outcome["c"]
    out = []
    for name in called:
        if name not in offered_set:
            stage = "called_not_offered"
        else:
            stage = "called_served" if name in served else "called_narrowed_out"
        out.append((TOOL_LINK, {"tool": name, "stage": stage}, 0))
    for name in _distinct([*called, *outcome["w"]]):
        if name in offered_set and name not in served:
            out.append((TOOL_LINK, {"tool": name, "stage": "missed"}, 0))
    top = ranked[0] if ranked else None
    chosen_called = top is not None and top in called
    if chosen_called:
        out.append((TOOL_LINK, {"tool": top, "stage": "chosen_called"}, 0))
    agreement = {True: "agree", False: "disagree"}.get(outcome["f"], "")
    bin_, micro = confidence_bin(pick["c"])
    out.append((SELECTION_LINK, {"agreement": agreement, "chosen_called": int(chosen_called),
                                 "bin": bin_}, micro))  # fmt: skip
    if offered:
        m = len(offered)
        doors = sum(1 for name in pick["s"] if name not in offered_set)
        ranked_offered = sum(1 for name in ranked if name in offered_set)
        out.append((NARROWING, {"offered": m, "side": "need",
                                "n": need(offered, ranked, called)}, 0))  # fmt: skip
        out.append((NARROWING, {"offered": m, "side": "ranked", "n": ranked_offered}, doors))
    return [(minute, kind, agent, model, values, t_out) for kind, values, t_out in out]


def _move(batch, misses: dict, key: tuple, pick, outcome, sign: int) -> None:
    project, run_id, _ = key
    for minute, kind, agent, model, values, t_out in contribution(pick, outcome):
        _add(batch, project, minute, kind, agent, model, values, n=sign, t_out=sign * t_out)
        if kind == TOOL_LINK and values["stage"] == "missed":
            misses[(project, values["tool"], run_id)] += sign


def _earliest(a: dict | None, b: dict | None) -> dict | None:
    if a is None or b is None:
        return a or b
    return a if (a["t"], a["k"]) <= (b["t"], b["k"]) else b


def fold(batch, after: int, upto: int) -> None:
    """Fold the picks, outcomes and turns with after < id <= upto into `batch` (a
    records.rollup._Batch) and the ToolDecision state. One read of the records, one of the
    stored decisions, one upsert."""
    rows = _fetch(after, upto)
    if not rows:
        return
    sides: dict[tuple, list] = defaultdict(lambda: [None, None])
    for project, kind, agent, model, ts, run_id, record_key, iteration, latency, is_error, text \
            in rows:  # fmt: skip
        minute = ts.replace(second=0, microsecond=0)
        body = orjson.loads(text) if text else {}
        if kind == TURN:
            _add_turn(batch, project, minute, agent or "", latency, is_error, body)
        elif kind == PICK:
            state = _pick_state(ts, record_key, model, agent, body)
            _add_pick(batch, project, minute, body, state)
            side = sides[(project, run_id, iteration)]
            side[0] = _earliest(side[0], state)
        elif kind == OUTCOME:
            state = _outcome_state(ts, record_key, body)
            for name in state["c"]:
                _add(batch, project, minute, TOOL, agent or "", "",
                     {"tool": name, "stage": "called"})  # fmt: skip
            side = sides[(project, run_id, iteration)]
            side[1] = _earliest(side[1], state)
    if not sides:
        return
    stored = _stored(list(sides))
    changed = []
    misses: dict[tuple, int] = defaultdict(int)  # (project, tool, run_id) -> change
    for key, (pick, outcome) in sides.items():
        before_pick, before_outcome = stored.get(key, (None, None))
        after_pick = _earliest(before_pick, pick)
        after_outcome = _earliest(before_outcome, outcome)
        if after_pick is before_pick and after_outcome is before_outcome:
            continue
        _move(batch, misses, key, before_pick, before_outcome, -1)
        _move(batch, misses, key, after_pick, after_outcome, +1)
        changed.append((*key, _text(after_pick), _text(after_outcome)))
    _save(changed)
    _save_misses(sorted((*key, n) for key, n in misses.items() if n))


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


_KINDS = (PICK, OUTCOME, TURN)
_RECORD = Record._meta.db_table
_DECISION = ToolDecision._meta.db_table


def _fetch(after: int, upto: int) -> list[tuple]:
    """(project, kind, agent, model, ts, run_id, record_key, iteration, latency_ms, is_error,
    JSON text) of the picks, outcomes (their data) and turns (their derived fields) in range."""
    if connection.vendor == "postgresql":
        body = "CASE WHEN kind = %s THEN derived::text ELSE data::text END"
    else:  # SQLite keeps JSON as text
        body = "CASE WHEN kind = %s THEN derived ELSE data END"
    sql = (
        "SELECT project_id, kind, agent, model, ts, run_id, record_key, iteration, latency_ms, "
        f"is_error, {body} FROM {_RECORD} WHERE id > %s AND id <= %s AND kind IN (%s, %s, %s)"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [TURN, after, upto, *_KINDS])
        rows = cursor.fetchall()
    if connection.vendor == "postgresql":
        return rows
    parse = connection.ops.convert_datetimefield_value
    return [(*r[:4], parse(r[4], None, connection), *r[5:]) for r in rows]


def _stored(keys_: list[tuple]) -> dict[tuple, tuple]:
    """{(project, run_id, iteration): (pick, outcome)} of the stored decisions, in one query
    (on PostgreSQL, the keys joined as arrays, as records.rollup reads classifications)."""
    out: dict[tuple, tuple] = {}
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            projects, runs, iterations = (list(column) for column in zip(*keys_, strict=True))
            cursor.execute(
                f"SELECT d.project_id, d.run_id, d.iteration, d.pick, d.outcome FROM {_DECISION} d "
                "JOIN unnest(%s::bigint[], %s::text[], %s::int[]) AS k(project_id, run_id, it) "
                "ON d.project_id = k.project_id AND d.run_id = k.run_id AND d.iteration = k.it",
                [projects, runs, iterations],
            )
            rows = cursor.fetchall()
        else:
            rows = []
            for start in range(0, len(keys_), 300):
                chunk = keys_[start : start + 300]
                where = " OR ".join(["(project_id = %s AND run_id = %s AND iteration = %s)"]
                                    * len(chunk))  # fmt: skip
                cursor.execute(
                    f"SELECT project_id, run_id, iteration, pick, outcome FROM {_DECISION} "
                    f"WHERE {where}",
                    [value for key in chunk for value in key],
                )
                rows += cursor.fetchall()
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
        if connection.vendor == "postgresql":
            cursor.execute(_STAGE)
            with cursor.cursor.copy(f"COPY tool_decision_stage ({_COLUMNS}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            cursor.execute(
                f"INSERT INTO {_DECISION} ({_COLUMNS}) SELECT {_COLUMNS} FROM tool_decision_stage "
                f"{_CONFLICT}"
            )
        else:
            cursor.executemany(
                f"INSERT INTO {_DECISION} ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s) {_CONFLICT}",
                rows,
            )

"""Demo data: a deterministic generator of realistic decision records.

`generate_records()` plays agent runs the way the frameworks file them: per loop
iteration a model selection, a classifier pick (or a pick error), the model call, the outcome,
the turn as seen on the wire, classifier-ladder verdicts for gated tool calls, and the notices,
provider errors and reliability events that go with them. Records are plain dicts in the posted
envelope shape, so they go through `records.contract.normalise` exactly like an agent's.

Pure and deterministic: one seeded `random.Random`, no database, no clock unless `end` is left
out. Runs are generated one at a time and each run one iteration at a time, so memory stays flat
however many records are asked for. Ids are `demo-<seed>-<n>`: seeding twice with the same
arguments stores nothing new the second time.

The record families live beside this module: records.demo.iteration (one loop iteration),
records.demo.ladder (verdicts on gated calls) and records.demo.reliability (notices, provider
errors, the reliability layer), over the cast of records.demo.cast.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta

from records.demo.cast import DEFAULT_AGENTS, Agent
from records.demo.iteration import iteration
from records.demo.ladder import incident_windows
from records.demo.run_state import AgentPlan, Generation, Run

# fmt: off
_STOP_REASONS = ("task complete", "task complete", "task complete", "max steps reached",
                 "budget exhausted", "user cancelled")
# fmt: on

_MS_PER_RECORD = 1000.0  # mean natural run time per record, to fit runs in the span


def generate_records(
    *,
    records: int,
    runs: int,
    seed: int = 0,
    end: datetime | None = None,
    span: timedelta = timedelta(days=1),
    agents: Sequence[Agent] = DEFAULT_AGENTS,
) -> Iterator[dict]:
    """Yield exactly `records` records spread over exactly `runs` runs, run after run.

    Timestamps fall inside [end - span, end]; `end` defaults to now (UTC, whole seconds) so that
    nothing is in the future. Raises ValueError for counts that cannot be honoured.
    """
    if records < 1:
        raise ValueError("records must be at least 1")
    if runs < 1:
        raise ValueError("runs must be at least 1")
    if runs > records:
        raise ValueError(f"runs ({runs}) cannot exceed records ({records}): every run has one")
    if span <= timedelta(0):
        raise ValueError("span must be positive")
    if end is None:
        end = datetime.now(UTC).replace(microsecond=0)
    elif end.tzinfo is None:
        raise ValueError("end must be timezone-aware")
    if not any(agent.weight > 0 for agent in agents):
        raise ValueError("at least one agent needs a weight above 0 to run at top level")
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    one_ms = timedelta(milliseconds=1)
    end_ms = (end - epoch) // one_ms  # floor: never after `end`
    lo_ms = -((epoch - (end - span)) // one_ms)  # ceiling: never before `end - span`
    return _Generator(records, runs, seed, lo_ms, end_ms, agents).generate()


class _Generator:
    def __init__(
        self, records: int, runs: int, seed: int, lo_ms: int, end_ms: int, agents: Sequence[Agent]
    ) -> None:
        rng = random.Random(seed)
        self.rng = rng
        self.records = records
        self.runs = runs
        self.prefix = f"demo-{seed}-"
        self.lo_ms = lo_ms
        self.end_ms = end_ms
        self.plans = {agent.name: AgentPlan(agent) for agent in agents}
        self.top = [self.plans[a.name] for a in agents if a.weight > 0]
        self.top_weights = [a.weight for a in agents if a.weight > 0]
        self.n = 0
        self._second = None
        self._second_text = ""
        self.generation = Generation(rng, end_ms, incident_windows(rng, lo_ms, end_ms))

    def generate(self) -> Iterator[dict]:
        rng = self.rng
        left_records, left_runs = self.records, self.runs
        parent: Run | None = None  # set when the previous run delegated to a sub-agent
        session: tuple[str, str, float] | None = None  # agent, session id, its last end ms
        sessions = 0
        for index in range(self.runs):
            run_id = f"{self.prefix}run-{index:06d}"
            if parent is not None and parent.sub in self.plans:
                plan = self.plans[parent.sub]
                run = Run(run_id, plan, parent.session_id, parent.run_id)
                run.station = "ancestor" if rng.random() < 0.4 else "leg"
                weight = 0.5  # delegated tasks are shorter than the runs that delegate them
            else:
                plan = rng.choices(self.top, self.top_weights)[0]
                if session is not None and session[0] == plan.agent.name and rng.random() < 0.6:
                    session_id = session[1]
                else:
                    sessions += 1
                    session_id = f"{self.prefix}sess-{sessions}"
                    session = None
                run = Run(run_id, plan, session_id, None)
                weight = 1.0
            if left_runs == 1:
                budget = left_records
            else:
                mean = left_records / left_runs
                # Run lengths are skewed: many short runs, a few long ones (mean weight 1).
                drawn = round(mean * weight * rng.lognormvariate(-0.18, 0.6))
                budget = max(1, min(drawn, left_records - (left_runs - 1)))
            left_records -= budget
            left_runs -= 1

            self._place(run, budget, parent, session)
            subs = [name for name in plan.agent.sub_agents if name in self.plans]
            if parent is None and left_runs > 0 and subs and rng.random() < 0.1:
                run.sub = rng.choice(subs)
                run.sub_step = 0 if budget < 14 else rng.randint(0, 1)
            yield from self._run_records(run, budget)

            parent = run if run.sub is not None else None
            if run.parent_run_id is None:
                ended = run.start_ms + run.t * run.scale
                session = (plan.agent.name, run.session_id, ended)

    def _place(
        self, run: Run, budget: int, parent: Run | None, session: tuple[str, str, float] | None
    ) -> None:
        """Choose the run's start and the scale that keeps it inside the span."""
        rng = self.rng
        estimate = budget * _MS_PER_RECORD
        if parent is not None:
            start = parent.sub_start_ms if parent.sub_start_ms is not None else parent.start_ms
        elif session is not None and session[1] == run.session_id:
            # The next run of a conversation starts after the previous one, if it still fits.
            start = int(session[2] + rng.lognormvariate(math.log(40_000), 1.0))
            if start + estimate > self.end_ms:
                start = None
        else:
            start = None
        if start is None:
            span = self.end_ms - self.lo_ms
            run.scale = min(1.0, 0.8 * span / estimate)
            room = max(0.0, span - estimate * run.scale)
            start = self.lo_ms + int(self._daytime(room))
        else:
            run.scale = min(1.0, 0.8 * max(0, self.end_ms - start) / estimate)
        run.start_ms = min(max(start, self.lo_ms), self.end_ms)

    def _daytime(self, room: float) -> float:
        """An offset in [0, room] that favours the working day (UTC), like real traffic."""
        rng = self.rng
        offset = rng.random() * room
        for _ in range(8):
            hour = ((self.lo_ms + offset) / 3_600_000.0) % 24.0
            if rng.random() * 1.6 < 1.0 + 0.6 * math.sin((hour - 8.0) * math.pi / 12.0):
                break
            offset = rng.random() * room
        return offset

    def _run_records(self, run: Run, budget: int) -> Iterator[dict]:
        rng = self.rng
        # Most runs end with the router's stop; the rest were cut off (crash, still running).
        stops = budget == 1 or rng.random() < 0.85
        reserve = 1 if stops else 0
        remaining = budget
        step = 0
        while remaining > reserve:
            events = iteration(self.generation, run, step, final=remaining - reserve <= 8)
            take = min(len(events), remaining - reserve)
            for kind, t, data in events[:take]:
                yield self._record(run, kind, t, data)
            remaining -= take
            step += 1
        if stops:
            run.t += rng.lognormvariate(math.log(300.0), 0.5)
            selected = run.model or run.plan.agent.main_model
            data = {
                "step": step,
                "default_model": run.plan.agent.main_model,
                "selected_model": selected,
                "action": "stop",
                "stop_reason": rng.choice(_STOP_REASONS),
            }
            if run.model is not None:
                data["previous_model"] = run.model
            yield self._record(run, "model_selection", run.t, data)

    def _record(self, run: Run, kind: str, t: float, data: dict) -> dict:
        ms = self.generation.abs_ms(run, t)
        second, milli = divmod(ms, 1000)
        if second != self._second:
            self._second = second
            self._second_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        n = self.n
        self.n = n + 1
        record = {
            "id": f"{self.prefix}{n}",
            "kind": kind,
            "run_id": run.run_id,
            "ts": f"{self._second_text}.{milli:03d}Z",
            "agent": run.plan.agent.name,
            "session_id": run.session_id,
            "data": data,
        }
        if run.parent_run_id is not None:
            record["parent_run_id"] = run.parent_run_id
        return record

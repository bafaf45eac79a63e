"""What the generator's record families share: each agent's plan, each run's state, and the
state of the whole generation (the seeded random source, the span's end, the bad spells).

One `random.Random` is drawn from in a fixed order by every family (records.demo.iteration,
records.demo.ladder, records.demo.reliability): that order is what makes a seed give the same
records every time.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from records.demo.cast import CONTROL_TOOLS, DOORS, SWAPS, Agent, profile_of


class AgentPlan:
    """Per-agent lookups computed once: wire names, the maps a turn carries, gated calls."""

    __slots__ = (
        "agent",
        "tool_set",
        "gated",
        "wire",
        "name_map",
        "control_map",
        "delegate",
        "classifier",
        "swaps",
    )

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.tool_set = frozenset(agent.tools)
        self.gated = frozenset(agent.gated)
        # MemberJunction wires hyphenated names; the implicit-protocol agents wire them as is.
        hyphen = agent.protocol != "implicit"
        self.wire = {
            name: name.replace("_", "-") if hyphen else name for name in agent.tools + DOORS
        }
        self.name_map = {wire: name for name, wire in self.wire.items()}
        self.delegate = {sub: "delegate_" + sub.replace("-", "_") for sub in agent.sub_agents}
        self.control_map: dict[str, dict] = {w: {"kind": k} for w, k in CONTROL_TOOLS.items()}
        for sub, wire in self.delegate.items():
            self.control_map[wire] = {"kind": "subAgent", "name": sub}
        self.classifier = profile_of(agent.classifier_model)
        self.swaps = SWAPS.get(agent.main_model)


class Run:
    """One run's state, carried from one iteration to the next."""

    __slots__ = (
        "run_id",
        "plan",
        "session_id",
        "parent_run_id",
        "start_ms",
        "scale",
        "t",
        "model",
        "seat_model",
        "missed",
        "streak",
        "open_circuits",
        "sub",
        "sub_step",
        "sub_start_ms",
        "station",
        "calls",
    )

    def __init__(
        self, run_id: str, plan: AgentPlan, session_id: str, parent_run_id: str | None
    ) -> None:
        self.run_id = run_id
        self.plan = plan
        self.session_id = session_id
        self.parent_run_id = parent_run_id
        self.start_ms = 0
        self.scale = 1.0
        self.t = 0.0  # natural ms since the run started, before scaling into the span
        self.model: str | None = None  # the model the previous step selected
        self.seat_model = plan.agent.seat_model
        self.missed = False  # the previous outcome missed a narrowed-out tool
        self.streak = 0  # consecutive contract breaks of the seat model in this run
        self.open_circuits: list[str] = []
        self.sub: str | None = None  # the sub-agent this run delegates to
        self.sub_step = -1
        self.sub_start_ms: int | None = None
        self.station = "leg"
        self.calls = 0


@dataclass
class Generation:
    """What one generate_records() call shares across its runs."""

    rng: random.Random
    end_ms: int
    # (start ms, end ms, seat model): when that seat breaks its contract most of the time.
    incidents: list[tuple[int, int, str]]

    def abs_ms(self, run: Run, t: float) -> int:
        # The clamp catches runs that took longer than estimated: nothing after `end`.
        return min(run.start_ms + int(t * run.scale), self.end_ms)

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
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

# --- the cast --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelProfile:
    provider: str
    # Lognormal (median ms, sigma): pick latency for classifier models, call duration for main
    # models. The sigmas differ so that the latency percentiles of each model look different.
    latency: tuple[float, float]
    # Chance that a verdict on this model breaks the output contract (outside incidents).
    contract_break: float = 0.02
    # Chance that the main model's first call is the classifier's top pick.
    first_agrees: float = 0.75
    # Chance that a pick fails outright (classifier models).
    pick_errors: float = 0.02
    # Chance that a turn calls a tool the harness never gave it (main models).
    invents: float = 0.03
    thinking: bool = False
    accepts_forced_tool_choice: bool = True


# The tables below read best aligned, one entry a line, so the formatter leaves them be.
# fmt: off
MODELS: dict[str, ModelProfile] = {
    # classifier models
    "claude-haiku-4-5": ModelProfile("anthropic", (140.0, 0.35), contract_break=0.02,
                                     first_agrees=0.8, pick_errors=0.02),
    "qwen3-8b": ModelProfile("ollama", (85.0, 0.75), contract_break=0.12, first_agrees=0.62,
                             pick_errors=0.06, accepts_forced_tool_choice=False),
    "gpt-5-mini": ModelProfile("openai", (260.0, 0.5), contract_break=0.05, first_agrees=0.72,
                               pick_errors=0.03),
    # main models
    "claude-sonnet-4-5": ModelProfile("anthropic", (1900.0, 0.45), contract_break=0.004,
                                      invents=0.03),
    "gpt-5": ModelProfile("openai", (3400.0, 0.55), contract_break=0.006, invents=0.06,
                          thinking=True),
    # Extended thinking refuses a forced tool choice: the UnsupportedToolChoiceError source.
    "claude-opus-5-5": ModelProfile("anthropic", (4600.0, 0.5), contract_break=0.002,
                                    invents=0.015, thinking=True, accepts_forced_tool_choice=False),
}
_UNKNOWN_MODEL = ModelProfile("openai", (1500.0, 0.5))

# Where the reliability layer sends a provider's traffic when it gives up on it.
FALLBACKS: dict[str, tuple[str, str]] = {
    "anthropic": ("openai", "gpt-5"),
    "openai": ("anthropic", "claude-sonnet-4-5"),
    "ollama": ("anthropic", "claude-haiku-4-5"),
}

# The router's swaps per default model: cheaper models for easy steps, bigger ones for hard ones.
SWAPS: dict[str, tuple[tuple[str, ...], tuple[float, ...]]] = {
    "claude-sonnet-4-5": (("claude-haiku-4-5", "claude-opus-5-5", "gpt-5"), (5, 3, 2)),
    "gpt-5": (("gpt-5-mini", "claude-sonnet-4-5"), (6, 4)),
    "claude-opus-5-5": (("claude-sonnet-4-5", "claude-haiku-4-5"), (6, 4)),
}

# Bad spells per seat model over the span (each 1/24 of it), when most verdicts break contract.
INCIDENTS: dict[str, int] = {"qwen3-8b": 3, "gpt-5-mini": 1}

# Always served, never offered: the tools the harness gives every call.
DOORS = ("read_skill", "list_skills", "skip_step", "present")
NARROW_TO = 3  # top-N ranked tools served when narrowing applies
# Names a model calls although no harness ever offered them.
INVENTED = ("refund_now", "execute_python", "browse", "search_documents", "delete_all",
            "get_weather", "bash")


@dataclass(frozen=True)
class Agent:
    name: str
    main_model: str
    classifier_model: str  # ranks the tools (tool_choice.pick)
    seat_model: str  # the classifier seat that rules on gated calls (classifier.verdict)
    protocol: str  # envelope | hybrid | implicit
    tools: tuple[str, ...]  # action names in offered order
    gated: tuple[str, ...] = ()  # calls that need a verdict
    narrowing: bool = True
    sub_agents: tuple[str, ...] = ()
    weight: float = 1.0  # share of top-level runs; 0 runs only as a sub-agent


DEFAULT_AGENTS: tuple[Agent, ...] = (
    Agent("support-bot", "claude-sonnet-4-5", "claude-haiku-4-5", "qwen3-8b", "hybrid",
          ("search_docs", "lookup_order", "read_ticket", "create_ticket", "send_email",
           "issue_refund", "escalate", "query_db"),
          gated=("send_email", "issue_refund", "create_ticket"), sub_agents=("billing-agent",),
          weight=4),
    Agent("code-reviewer", "gpt-5", "gpt-5-mini", "gpt-5-mini", "envelope",
          ("read_file", "grep", "list_dir", "git_diff", "write_file", "run_tests", "run_shell",
           "post_comment"),
          gated=("write_file", "run_shell", "post_comment"), sub_agents=("test-runner",),
          weight=3),
    Agent("research-assistant", "claude-opus-5-5", "qwen3-8b", "claude-haiku-4-5", "implicit",
          ("web_search", "fetch_url", "read_pdf", "summarize", "save_note", "cite",
           "send_email"),
          gated=("send_email", "save_note"), sub_agents=("web-researcher",), weight=2),
    Agent("data-analyst", "claude-sonnet-4-5", "qwen3-8b", "qwen3-8b", "hybrid",
          ("query_db", "describe_table", "run_python", "plot_chart", "export_csv",
           "write_file"),
          gated=("run_python", "write_file", "export_csv"), narrowing=False, weight=2),
    # sub-agents only
    Agent("billing-agent", "gpt-5", "claude-haiku-4-5", "qwen3-8b", "implicit",
          ("lookup_invoice", "issue_refund", "update_subscription"),
          gated=("issue_refund", "update_subscription"), weight=0),
    Agent("test-runner", "claude-sonnet-4-5", "gpt-5-mini", "gpt-5-mini", "envelope",
          ("run_tests", "read_file", "grep", "write_file"), gated=("write_file",), weight=0),
    Agent("web-researcher", "gpt-5", "qwen3-8b", "claude-haiku-4-5", "hybrid",
          ("web_search", "fetch_url", "summarize", "read_pdf"), weight=0),
)

_ARGUMENTS: dict[str, tuple[dict, ...]] = {
    "search_docs": ({"query": "refund policy"}, {"query": "reset password"}),
    "web_search": ({"query": "mergeable quantile sketches"}, {"query": "llm tool routing"}),
    "query_db": ({"sql": "select count(*) from orders where status = 'late'"},),
    "read_file": ({"path": "src/app.py"}, {"path": "README.md"}),
    "write_file": ({"path": "src/app.py", "content": "..."},),
    "send_email": ({"to": "customer@example.com", "subject": "Your refund"},),
    "issue_refund": ({"order": "A-1042", "amount": 39.0},),
    "run_shell": ({"cmd": "pytest -q"},),
    "grep": ({"pattern": "TODO", "path": "src"},),
    "fetch_url": ({"url": "https://example.com/paper"},),
}
_NO_ARGUMENTS: tuple[dict, ...] = ({},)
_SAY = ("Let me check that.", "Looking into it now.", "I'll take the next step.",
        "Checking the details first.")
_DONE = ("All done: the issue is resolved.", "Here is the summary you asked for.",
         "The task is complete.")
_ENVELOPE_ACTIONS = '{"taskComplete":false,"nextStep":{"type":"Actions"}}'
_ENVELOPE_CHAT = ('{"taskComplete":false,"nextStep":{"type":"Chat"},'
                  '"message":"Which account do you mean?"}')
_ENVELOPE_DONE = '{"taskComplete":true,"message":"Done."}'
_ENVELOPE_PAYLOAD = ('{"taskComplete":false,'
                     '"payloadChangeRequest":{"updateElements":{"status":"triaged"}}}')
_ENVELOPE_RETRY = '{"taskComplete":false,"nextStep":{"type":"Retry"}}'
_UNPARSEABLE = "Sure! I will look that up for you now."
_CONTROL_TOOLS = {"complete_task": "taskComplete", "ask_user": "chat",
                  "update_payload": "payloadChange"}

_ROLE_REASONS = ("tier_below_main", "tier_table", "role_fallback", "main_only",
                 "role_unresolvable")
_ROUTE_CAUSES = ("credential_url_mismatch", "provider_unreachable", "model_not_served")
_STOP_REASONS = ("task complete", "task complete", "task complete", "max steps reached",
                 "budget exhausted", "user cancelled")
# (status, message) of classifier calls that fail; no status is a client-side timeout.
_PICK_FAILURES = ((529, "overloaded"), (503, "service unavailable"), (429, "rate limited"),
                  (None, "timed out after 3000 ms"))
# fmt: on

_MS_PER_RECORD = 1000.0  # mean natural run time per record (measured), to fit runs in the span
_GAP_MU = math.log(1200.0)  # median ms between iterations (tool execution, harness)


# --- public API ----------------------------------------------------------------------------


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


# --- the generator -------------------------------------------------------------------------


class _AgentPlan:
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
        self.control_map: dict[str, dict] = {w: {"kind": k} for w, k in _CONTROL_TOOLS.items()}
        for sub, wire in self.delegate.items():
            self.control_map[wire] = {"kind": "subAgent", "name": sub}
        self.classifier = MODELS.get(agent.classifier_model, _UNKNOWN_MODEL)
        self.swaps = SWAPS.get(agent.main_model)


class _Run:
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
        self, run_id: str, plan: _AgentPlan, session_id: str, parent_run_id: str | None
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


Event = tuple[str, float, dict]  # kind, natural ms, data


class _Generator:
    def __init__(
        self, records: int, runs: int, seed: int, lo_ms: int, end_ms: int, agents: Sequence[Agent]
    ) -> None:
        self.rng = random.Random(seed)
        self.records = records
        self.runs = runs
        self.prefix = f"demo-{seed}-"
        self.lo_ms = lo_ms
        self.end_ms = end_ms
        self.plans = {agent.name: _AgentPlan(agent) for agent in agents}
        self.top = [self.plans[a.name] for a in agents if a.weight > 0]
        self.top_weights = [a.weight for a in agents if a.weight > 0]
        self.n = 0
        self._second = None
        self._second_text = ""
        self.incidents = self._incidents()

    def _incidents(self) -> list[tuple[int, int, str]]:
        """Windows in which a seat model breaks its contract most of the time.

        Streaks are counted in `ts` order across runs, so a bad spell must be a stretch of time
        (a bad deploy, an overloaded host), not a property of one run.
        """
        span = self.end_ms - self.lo_ms
        windows = []
        for model, count in INCIDENTS.items():
            for _ in range(count):
                length = max(1, span // 24)
                start = self.lo_ms + int(self.rng.random() * max(1, span - length))
                windows.append((start, start + length, model))
        return windows

    # --- runs --------------------------------------------------------------------------------

    def generate(self) -> Iterator[dict]:
        rng = self.rng
        left_records, left_runs = self.records, self.runs
        parent: _Run | None = None  # set when the previous run delegated to a sub-agent
        session: tuple[str, str, float] | None = None  # agent, session id, its last end ms
        sessions = 0
        for index in range(self.runs):
            run_id = f"{self.prefix}run-{index:06d}"
            if parent is not None and parent.sub in self.plans:
                plan = self.plans[parent.sub]
                run = _Run(run_id, plan, parent.session_id, parent.run_id)
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
                run = _Run(run_id, plan, session_id, None)
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
        self, run: _Run, budget: int, parent: _Run | None, session: tuple[str, str, float] | None
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

    def _run_records(self, run: _Run, budget: int) -> Iterator[dict]:
        rng = self.rng
        # Most runs end with the router's stop; the rest were cut off (crash, still running).
        stops = budget == 1 or rng.random() < 0.85
        reserve = 1 if stops else 0
        remaining = budget
        step = 0
        while remaining > reserve:
            events = self._iteration(run, step, final=remaining - reserve <= 8)
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

    def _record(self, run: _Run, kind: str, t: float, data: dict) -> dict:
        ms = self._abs_ms(run, t)
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

    def _abs_ms(self, run: _Run, t: float) -> int:
        # The clamp catches runs that took longer than estimated: nothing after `end`.
        return min(run.start_ms + int(t * run.scale), self.end_ms)

    # --- one loop iteration --------------------------------------------------------------------

    def _iteration(self, run: _Run, step: int, final: bool) -> list[Event]:
        rng = self.rng
        rand = rng.random
        plan = run.plan
        out: list[Event] = []
        emit = out.append
        t = run.t
        if step:
            t += rng.lognormvariate(_GAP_MU, 0.8)
        if step == 0:
            t = self._run_notices(run, out, t)
        elif rand() < 0.012:
            t = self._config_notice(run, out, t)

        selection, forced = self._selection(run, step, final)
        emit(("model_selection", t, selection))
        selected = selection["selected_model"]
        profile = MODELS.get(selected, _UNKNOWN_MODEL)
        run.model = selected

        call_model = selected
        if forced and not profile.accepts_forced_tool_choice:
            t = self._tool_choice_refused(out, t, selected, profile.provider)
        elif run.open_circuits:
            t = self._close_circuits(run, out, t)
        elif rand() < 0.05:
            t, call_model = self._provider_trouble(run, out, t, selected, profile.provider)

        # the classifier pick, or its failure
        kind, pick, served, narrowed = self._pick(run, step, final)
        t += pick["latencyMs"]
        emit((kind, t, pick))
        top = pick["ranked"][0]["name"] if kind == "tool_choice.pick" else None

        # what the model does with it
        turn_kind = self._turn_kind(run, step, final)
        called: list[str] = []  # action names of tool calls (control calls excluded)
        wires: list[str] = []
        if turn_kind == "action":
            called, wires = self._calls(run, served, top, narrowed, call_model)

        # the model call
        call_profile = MODELS.get(call_model, _UNKNOWN_MODEL)
        duration = round(
            rng.lognormvariate(math.log(call_profile.latency[0]), call_profile.latency[1]), 1
        )
        tokens_in = 2400 + 1500 * min(step, 40) + rng.randint(0, 1800)
        tokens_out = int(rng.lognormvariate(math.log(180.0), 0.8)) + 1
        usage = {"input": tokens_in, "output": tokens_out}
        if call_profile.provider == "anthropic" and step:
            usage["cacheRead"] = int(tokens_in * 0.7)
        elif call_profile.provider == "anthropic":
            usage["cacheWrite"] = int(tokens_in * 0.6)
        if call_profile.thinking:
            usage["thinking"] = rng.randint(200, 3000)
        truncated = rand() < 0.01
        cost = round(tokens_in * 3e-6 + tokens_out * 15e-6, 6)
        turn = self._turn(run, turn_kind, wires, called, duration, truncated, cost)
        stop = "maxTokens" if truncated else "toolUse" if "toolCalls" in turn else "endTurn"
        call = {"iteration": step, "provider": call_profile.provider, "model": call_model}
        call.update(usage=usage, stopReason=stop, durationMs=duration, toolsCount=len(served))
        call["messagesCount"] = 2 + 2 * step
        emit(("model_call", t + 5, call))
        t += duration

        if called:
            outcome: dict = {"kind": "outcome", "iteration": step, "called": called}
            if top is not None:
                outcome["firstAgrees"] = called[0] == top
            wanted = [name for name in called if name in plan.tool_set and name not in served]
            if wanted:
                outcome["miss"] = {"wanted": wanted}
            run.missed = bool(wanted)
            emit(("tool_choice.outcome", t, outcome))
        else:
            run.missed = False

        t += 1
        emit(("turn", t, turn))
        if turn_kind == "subAgent":
            run.sub_start_ms = self._abs_ms(run, t)

        # gated calls go to the classifier ladder
        for name in called[:2]:
            if name in plan.gated:
                t = self._ladder(run, out, t, name)

        if rand() < 0.01:  # a code this version of Decisionboard does not know
            t += 1
            message = "context compacted before the next call"
            detail = {"messagesBefore": 2 + 2 * step, "messagesAfter": 6}
            detail["tokensSaved"] = tokens_in // 2
            emit(_notice(t, "engine.context_compacted", "info", "developer", message, detail))
        run.t = t
        return out

    def _selection(self, run: _Run, step: int, final: bool) -> tuple[dict, bool]:
        """The router's event for this step, and whether it forces a tool choice.

        Mostly the default model; sometimes a swap for one step, sometimes a retried step.
        """
        rng = self.rng
        rand = rng.random
        plan = run.plan
        agent = plan.agent
        selection: dict = {"step": step, "default_model": agent.main_model}
        if plan.swaps is not None and rand() < 0.12:
            selected = rng.choices(plan.swaps[0], plan.swaps[1])[0]
            action = "select"
        else:
            selected = agent.main_model
            action = "continue"
        selection["selected_model"] = selected
        if run.model is not None:
            selection["previous_model"] = run.model
        selection["action"] = action
        selection["retry"] = rand() < 0.05
        profile = MODELS.get(selected, _UNKNOWN_MODEL)
        # Wrapping up, the harness forces the `present` door; some models refuse that.
        forced = (final and rand() < 0.6) or rand() < 0.03
        patch: dict | None = None
        if forced:
            patch = {"tool_choice": {"type": "tool", "name": "present"}}
        elif action == "select" and rand() < 0.7:
            r = rand()
            if r < 0.4:
                patch = {"temperature": 0.2, "active_tools": list(agent.tools[:3])}
            elif r < 0.7:
                patch = {"max_tokens": 4096}
            else:
                patch = {"preamble": "Be brief.", "additional_params": {"reasoning": "low"}}
        if patch is not None:
            selection["request_patch"] = patch
        if patch is not None or rand() < 0.15:
            selection["capabilities"] = {
                "composes_native_output_with_tools": not profile.thinking,
                "accepts_forced_tool_choice": profile.accepts_forced_tool_choice,
            }
        return selection, forced

    def _pick(self, run: _Run, step: int, final: bool) -> tuple[str, dict, list[str], bool]:
        """The classifier's ranking and what was served, or the failure that served it all.

        Returns the record's kind, its data, the served tools and whether they were narrowed.
        """
        rng = self.rng
        rand = rng.random
        agent = run.plan.agent
        classifier = run.plan.classifier
        offered = [name for name in agent.tools if rand() < 0.85]
        if len(offered) < 2:
            offered = list(agent.tools)
        if rand() < classifier.pick_errors:
            status, message = rng.choice(_PICK_FAILURES)
            if status is None:
                latency = 3000.0  # the client gave up at its deadline
            else:
                latency = round(rng.lognormvariate(math.log(classifier.latency[0] * 4), 0.6), 1)
            ref = {"name": classifier.provider}
            if rand() < 0.75:
                ref["model"] = agent.classifier_model
            served = offered + list(DOORS)
            failure: dict = {
                "kind": "pick-error",
                "iteration": step,
                "source": "classifier",
                "classifier": ref,
            }
            if status is not None:
                failure["status"] = status
            failure["message"] = message
            failure["latencyMs"] = latency
            failure["served"] = served
            if agent.narrowing:
                failure["narrowedSkipped"] = "unavailable"
            return "tool_choice.pick_error", failure, served, False

        latency = round(
            rng.lognormvariate(math.log(classifier.latency[0]), classifier.latency[1]), 1
        )
        weights = [rand() ** 3 for _ in offered]
        total = sum(weights) or 1.0
        scored = sorted(
            ((round(w / total, 3), name) for w, name in zip(weights, offered, strict=True)),
            reverse=True,
        )
        # An unscored name is absent: drop the zeros, and the tail when the classifier
        # returned only its top few.
        keep = len(scored) if rand() < 0.7 else 4
        scored = [pair for pair in scored[:keep] if pair[0] > 0] or scored[:1]
        top = scored[0][1]
        skip = None
        narrowed = False
        if agent.narrowing:
            if len(offered) <= NARROW_TO:
                skip = "too-few"
            elif run.missed:
                skip = "after-miss"
            elif final and rand() < 0.5:
                skip = "wrap-up"
            elif rand() < 0.02:
                skip = "unavailable"  # the ranking came back after the narrowing budget
            narrowed = skip is None
        if narrowed:
            served = [name for _, name in scored[:NARROW_TO]] + list(DOORS)
        else:
            served = offered + list(DOORS)
        pick = {
            "kind": "pick",
            "iteration": step,
            "source": "classifier",
            "classifier": {"name": classifier.provider, "model": agent.classifier_model},
            "offered": offered,
            "ranked": [{"name": name, "score": score} for score, name in scored],
        }
        if rand() >= 0.02:  # otherwise the provider named nothing offered
            pick["chosen"] = top
        pick["confidence"] = scored[0][0]
        if classifier.provider != "ollama":  # the local model reports no usage
            pick["usage"] = {
                "inputTokens": 300 + 90 * len(offered) + rng.randint(0, 400),
                "outputTokens": rng.randint(5, 24),
            }
        pick["latencyMs"] = latency
        pick["served"] = served
        pick["narrowed"] = narrowed
        if skip is not None:
            pick["narrowedSkipped"] = skip
        return "tool_choice.pick", pick, served, narrowed

    def _calls(
        self, run: _Run, served: list[str], top: str | None, narrowed: bool, model: str
    ) -> tuple[list[str], list[str]]:
        """The tools the model calls: action names for the outcome, wire names for the turn.

        Mostly the classifier's top pick; otherwise another served tool, a door, a tool that
        narrowing left out (a miss) or, now and then, one no harness ever offered (invented).
        """
        rng = self.rng
        rand = rng.random
        plan = run.plan
        callable_ = [name for name in served if name in plan.tool_set]
        if top is not None and rand() < plan.classifier.first_agrees:
            first = top
        else:
            r = rand()
            missable = [name for name in plan.agent.tools if name not in served]
            if narrowed and missable and r < 0.3:
                first = rng.choice(missable)
            elif r < 0.4:
                first = rng.choice(DOORS)
            else:
                first = rng.choice(callable_ or list(plan.agent.tools))
        called = [first]
        if rand() < 0.15 and len(callable_) > 1:
            second = rng.choice(callable_)
            if second != first:
                called.append(second)
        wires = [plan.wire.get(name, name) for name in called]
        if rand() < MODELS.get(model, _UNKNOWN_MODEL).invents:
            invented = rng.choice(INVENTED)
            if rand() < 0.5:
                called.insert(0, invented)
                wires.insert(0, invented)
            else:
                called.append(invented)
                wires.append(invented)
        return called, wires

    def _turn_kind(self, run: _Run, step: int, final: bool) -> str:
        if run.sub is not None and step == run.sub_step:
            return "subAgent"
        if final:
            return "taskComplete"
        r = self.rng.random()
        if r < 0.03:
            return "chat"
        if r < 0.045:
            return "payloadChange"
        if r < 0.055:
            return "empty"
        if run.plan.agent.protocol == "envelope":
            # Models break the JSON envelope far more often than they misuse a tool call.
            if r < 0.1:
                return "unparseable"
            if r < 0.14:
                return "other"
        return "action"

    def _turn(
        self,
        run: _Run,
        kind: str,
        wires: list[str],
        called: list[str],
        duration: float,
        truncated: bool,
        cost: float,
    ) -> dict:
        rng = self.rng
        plan = run.plan
        protocol = plan.agent.protocol
        turn: dict = {}
        # An envelope harness often leaves the protocol out: absent means envelope.
        if protocol != "envelope" or rng.random() < 0.5:
            turn["protocol"] = protocol
        calls: list[dict] = []
        text = ""
        if kind == "action":
            for wire, name in zip(wires, called, strict=True):
                arguments = rng.choice(_ARGUMENTS.get(name, _NO_ARGUMENTS))
                calls.append({"name": wire, "arguments": dict(arguments)})
            if protocol == "envelope":
                text = _ENVELOPE_ACTIONS if rng.random() < 0.5 else ""
            elif protocol == "hybrid" and rng.random() < 0.6:
                text = rng.choice(_SAY)
        elif kind == "subAgent":
            sub = run.sub or ""
            if protocol == "envelope":
                text = (
                    '{"taskComplete":false,"nextStep":{"type":"Sub-Agent",'
                    f'"subAgent":{{"name":"{sub}"}}}}}}'
                )
            else:
                calls.append({"name": plan.delegate[sub], "arguments": {"task": "take it over"}})
        elif kind == "taskComplete":
            if protocol == "envelope":
                text = _ENVELOPE_DONE
            elif protocol == "implicit":
                text = rng.choice(_DONE)  # plain text ends an implicit-protocol run
            else:  # hybrid keeps the envelope rules: without the envelope, the control tool
                if rng.random() < 0.5:
                    text = rng.choice(_DONE)
                calls.append({"name": "complete_task", "arguments": {}})
        elif kind == "chat":
            if protocol in ("envelope", "hybrid"):
                text = _ENVELOPE_CHAT
            else:
                calls.append({"name": "ask_user", "arguments": {"question": "Which order?"}})
        elif kind == "payloadChange":
            if protocol == "envelope":
                text = _ENVELOPE_PAYLOAD
            else:
                calls.append({"name": "update_payload", "arguments": {"status": "triaged"}})
        elif kind == "unparseable":
            text = _UNPARSEABLE
        elif kind == "other":
            text = _ENVELOPE_RETRY
        if text or rng.random() < 0.5:
            turn["text"] = text
        if calls:
            turn["toolCalls"] = calls
        # The implicit-protocol harness does not always send its map; then nothing is invented.
        if protocol != "implicit" or rng.random() < 0.7:
            turn["toolNameMap"] = dict(plan.name_map)
            turn["controlToolMap"] = {wire: dict(spec) for wire, spec in plan.control_map.items()}
        if truncated:
            turn["finishReason"] = "length"
        else:
            turn["finishReason"] = "tool_calls" if calls else "stop"
        if kind == "action" and rng.random() < 0.015:
            turn["executionError"] = {"message": "tool timed out after 30 s", "tool": called[0]}
        turn["durationMs"] = duration
        turn["totalCost"] = cost
        return turn

    # --- classifier ladder -----------------------------------------------------------------

    def _break_chance(self, run: _Run, model: str, t: float) -> float:
        ms = self._abs_ms(run, t)
        for lo, hi, bad in self.incidents:
            if bad == model and lo <= ms < hi:
                return 0.6
        return MODELS.get(model, _UNKNOWN_MODEL).contract_break

    def _ladder(self, run: _Run, out: list[Event], t: float, tool: str) -> float:
        """One classification: rung 0 on the seat, a re-ask, then rung 1 on the main model."""
        rng = self.rng
        rand = rng.random
        emit = out.append
        run.calls += 1
        call_id = f"call-{run.calls}"
        seat = run.seat_model
        main = run.model or run.plan.agent.main_model
        budget = 4000.0 if rand() < 0.7 else None
        block = 0.3 if tool in ("issue_refund", "run_shell", "run_python") else 0.1

        def verdict(
            t: float, model: str, rung: int, reask: bool, wall: float, result: dict
        ) -> Event:
            data = {"toolName": tool, "toolCallId": call_id, "model": model}
            if seat != main or rand() < 0.5:  # a seat on the main model is often left out
                data["seatModel"] = seat
            # The engine thinks harder when it re-asks.
            data.update(rung=rung, seat="think" if reask else "low", reask=reask)
            data.update(result)
            data["station"] = run.station
            data["wallMs"] = wall
            if budget is not None:
                data["budgetMs"] = budget
            return ("classifier.verdict", t, data)

        def wall_ms(model: str) -> float:
            median = MODELS.get(model, _UNKNOWN_MODEL).latency[0]
            return round(rng.lognormvariate(math.log(median * 2.5 + 200), 0.5), 1)

        def ruled() -> dict:
            return {"outcome": "ruled", "verdict": "block" if rand() < block else "allow"}

        p_break = self._break_chance(run, seat, t)
        r = rand()
        if r < 0.05:
            cause = "timeout" if rand() < 0.6 else "error"
            disposition = "asked" if rand() < 0.6 else "denied"
            wall = (budget or 4000.0) if cause == "timeout" else wall_ms(seat) / 3
            t += wall
            result = {"outcome": "unavailable", "cause": cause, "disposition": disposition}
            emit(verdict(t, seat, 0, False, wall, result))
            detail = {"toolName": tool, "toolCallId": call_id, "cause": cause}
            detail.update(disposition=disposition, station=run.station)
            if budget is not None:
                detail["budgetMs"] = budget
            failed = "timed out" if cause == "timeout" else "failed"
            handed = "handed to approval" if disposition == "asked" else "denied"
            message = f"the classifier {failed}; the call was {handed}"
            emit(_notice(t + 1, "classifier.unavailable", "warn", "user", message, detail))
            return t + 1
        if r >= 0.05 + p_break:
            wall = wall_ms(seat)
            t += wall
            emit(verdict(t, seat, 0, False, wall, ruled()))
            run.streak = 0
            return t

        # The seat broke its output contract: re-ask it (mostly), then walk on to the main model.
        wall = wall_ms(seat)
        t += wall
        form = "missing" if rand() < 0.6 else "conflict"
        emit(verdict(t, seat, 0, False, wall, {"outcome": "parse_error", "form": form}))
        run.streak += 1
        if rand() < 0.7:
            wall = wall_ms(seat) * 1.8
            t += wall
            if rand() >= p_break:
                emit(verdict(t, seat, 0, True, wall, ruled()))
                run.streak = 0
                return t
            form = "conflict" if rand() < 0.5 else "missing"
            emit(verdict(t, seat, 0, True, wall, {"outcome": "parse_error", "form": form}))
            run.streak += 1
        wall = wall_ms(main)
        t += wall
        emit(verdict(t, main, 1, False, wall, ruled()))
        message = f"classifier {seat} gave no ruling; asked {main}"
        detail = {"from": seat, "to": main, "cause": "parse_error"}
        emit(_notice(t + 1, "classifier.fallback", "warn", "operator", message, detail))
        if run.streak >= 2:
            message = f"{seat} broke the verdict contract {run.streak} times in a row"
            detail = {"model": seat, "streak": run.streak}
            emit(_notice(t + 2, "classifier.contract_broken", "warn", "operator", message, detail))
        return t + 2

    # --- notices, provider errors, reliability -------------------------------------------------

    def _run_notices(self, run: _Run, out: list[Event], t: float) -> float:
        """How the classifier seat was resolved, announced when the run starts."""
        rng = self.rng
        main = run.plan.agent.main_model
        r = rng.random()
        if r < 0.1:
            message = "no classifier role named a model; using a default"
            detail = {"reason": rng.choice(_ROLE_REASONS), "model": run.seat_model}
            out.append(_notice(t, "classifier.role_defaulted", "info", "operator", message, detail))
        elif r < 0.16 and run.seat_model != main:
            message = "classifier route is unusable; the main model classifies"
            detail = {
                "seat": "classifier",
                "from": run.seat_model,
                "to": main,
                "cause": rng.choice(_ROUTE_CAUSES),
            }
            out.append(_notice(t, "route.fallback_to_primary", "warn", "operator", message, detail))
            run.seat_model = main
        elif r < 0.2:
            t = self._config_notice(run, out, t)
        return t + 1

    def _config_notice(self, run: _Run, out: list[Event], t: float) -> float:
        if self.rng.random() < 0.5:
            message = f"no route serves the classifier model {run.seat_model}"
            detail = {"seat": "classifier", "model": run.seat_model}
            out.append(
                _notice(t, "route.classifier_unroutable", "error", "operator", message, detail)
            )
        else:
            message = "autoMode.classifierFallback names an unknown model; ignoring it"
            detail = {
                "setting": "autoMode.classifierFallback",
                "value": "gpt-4-legacy",
                "using": run.plan.agent.main_model,
            }
            code = "config.auto_mode_classifier_fallback_invalid"
            out.append(_notice(t, code, "warn", "developer", message, detail))
        return t + 1

    def _tool_choice_refused(self, out: list[Event], t: float, model: str, provider: str) -> float:
        t += self.rng.lognormvariate(math.log(250.0), 0.4)
        message = "tool_choice forcing a tool is not supported with extended thinking"
        error = _provider_error("UnsupportedToolChoiceError", provider, model, False, 400, message)
        error["toolChoice"] = {"type": "tool", "name": "present"}
        out.append(("provider.error", t, error))
        reason = "forced tool choice refused; retrying without it"
        out.append(("reliability", t + 1, _fail_fast("schema-fail", reason, provider)))
        return t + 1

    def _close_circuits(self, run: _Run, out: list[Event], t: float) -> float:
        for provider in run.open_circuits:
            t += 1
            out.append(("reliability", t, _circuit("half-open", "cool-down elapsed", provider)))
            t += self.rng.lognormvariate(math.log(400.0), 0.3)
            out.append(("reliability", t, _circuit("closed", "probe succeeded", provider)))
        run.open_circuits = []
        return t

    def _provider_trouble(
        self, run: _Run, out: list[Event], t: float, model: str, provider: str
    ) -> tuple[float, str]:
        """A failed provider request and what the reliability layer did about it.

        Returns the new clock and the model that finally served the call.
        """
        rng = self.rng
        emit = out.append
        other, other_model = FALLBACKS.get(provider, ("openai", "gpt-5"))
        t += rng.lognormvariate(math.log(400.0), 0.6)
        scenario = rng.choices(("rate", "overloaded", "server", "connection"), (4, 3, 2, 2))[0]
        if scenario == "rate":
            message = "429 Too Many Requests"
            emit(
                (
                    "provider.error",
                    t,
                    _provider_error("RateLimitError", provider, model, True, 429, message),
                )
            )
            t += rng.uniform(1000, 4000)  # the backoff
            retried = _retried(1, "rate-limit", provider, provider, "retry-same", message)
            emit(("reliability", t, retried))
            emit(("reliability", t + 1, _recovered(2, "retry", provider)))
            return t + 1, model
        if scenario == "connection":
            message = "connection reset by peer"
            emit(
                (
                    "provider.error",
                    t,
                    _provider_error("APIConnectionError", provider, model, True, None, message),
                )
            )
            t += rng.uniform(200, 1000)
            emit(
                ("reliability", t, _retried(1, "unknown", provider, other, "retry-other", message))
            )
            emit(("reliability", t + 1, _recovered(2, "retry-other", other)))
            return t + 1, other_model
        if scenario == "overloaded":
            status = 529 if provider == "anthropic" else 503
            message = f"{status} overloaded"
            emit(
                (
                    "provider.error",
                    t,
                    _provider_error("OverloadedError", provider, model, True, status, message),
                )
            )
            t += rng.uniform(500, 2000)
            retried = _retried(1, "5xx-transient", provider, provider, "retry-same", message)
            emit(("reliability", t, retried))
            t += rng.uniform(500, 2000)
            reason = f"{message} after 2 attempts"
            emit(("reliability", t, _fallback(provider, other, "5xx-transient", reason)))
            emit(("reliability", t + 1, _recovered(3, "fallback", other)))
            return t + 1, other_model
        # A run of server errors opens the circuit: calls fail fast and go to the fallback until
        # the next iteration closes it again.
        message = "500 internal server error"
        emit(
            (
                "provider.error",
                t,
                _provider_error("InternalServerError", provider, model, True, 500, message),
            )
        )
        emit(("reliability", t + 1, _circuit("open", "5 consecutive failures", provider)))
        reason = f"circuit open for {provider}"
        emit(("reliability", t + 2, _fail_fast("circuit-open", reason, provider)))
        emit(("reliability", t + 3, _fallback(provider, other, "circuit-open", "circuit open")))
        run.open_circuits.append(provider)
        return t + 3, other_model


# --- record data builders --------------------------------------------------------------------


def _notice(t: float, code: str, level: str, audience: str, message: str, detail: dict) -> Event:
    data = {"code": code, "level": level, "audience": audience, "message": message}
    data["detail"] = detail
    return ("notice", t, data)


def _provider_error(
    error: str, provider: str, model: str, retryable: bool, status: int | None, message: str
) -> dict:
    data: dict = {"error": error, "provider": provider, "model": model, "retryable": retryable}
    if status is not None:
        data["status"] = status
    data["message"] = message
    return data


def _retried(
    attempt: int, error_kind: str, from_provider: str, to_provider: str, action: str, message: str
) -> dict:
    return {
        "type": "retried",
        "attempt": attempt,
        "action": action,
        "errorKind": error_kind,
        "errorMessage": message,
        "fromProvider": from_provider,
        "toProvider": to_provider,
    }


def _recovered(attempt: int, via: str, provider: str) -> dict:
    return {
        "type": "recovered",
        "attempt": attempt,
        "errorKind": "ok",
        "recoveredVia": via,
        "providerName": provider,
    }


def _fallback(primary: str, fallback: str, error_kind: str, reason: str) -> dict:
    return {
        "type": "fallback_triggered",
        "primary": primary,
        "fallback": fallback,
        "errorKind": error_kind,
        "reason": reason,
    }


def _fail_fast(error_kind: str, reason: str, provider: str) -> dict:
    return {
        "type": "fail_fast",
        "errorKind": error_kind,
        "reason": reason,
        "providerName": provider,
    }


def _circuit(state: str, reason: str, provider: str) -> dict:
    return {"type": "circuit_changed", "state": state, "reason": reason, "providerName": provider}

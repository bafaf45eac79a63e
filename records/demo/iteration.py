"""One loop iteration of a run: the router's model selection, the classifier's pick (or its
failure), the model call, the outcome, and the turn as the harness puts it on the wire.

Gated calls go on to the classifier ladder (records.demo.ladder); provider trouble and the
run's opening notices come from records.demo.reliability.
"""

from __future__ import annotations

import math

from records.demo.cast import DOORS, INVENTED, NARROW_TO, profile_of
from records.demo.event_data import Event, notice
from records.demo.ladder import ladder
from records.demo.reliability import (
    close_circuits,
    config_notice,
    provider_trouble,
    run_notices,
    tool_choice_refused,
)
from records.demo.run_state import Generation, Run

# What the turns say, and the arguments of their tool calls.
# fmt: off
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
# (status, message) of classifier calls that fail; no status is a client-side timeout.
_PICK_FAILURES = ((529, "overloaded"), (503, "service unavailable"), (429, "rate limited"),
                  (None, "timed out after 3000 ms"))
# fmt: on

_GAP_MU = math.log(1200.0)  # median ms between iterations (tool execution, harness)


def iteration(gen: Generation, run: Run, step: int, final: bool) -> list[Event]:
    """The events of the run's iteration `step`, in order; `final` when the run is wrapping up."""
    rng = gen.rng
    rand = rng.random
    plan = run.plan
    out: list[Event] = []
    emit = out.append
    t = run.t
    if step:
        t += rng.lognormvariate(_GAP_MU, 0.8)
    if step == 0:
        t = run_notices(gen, run, out, t)
    elif rand() < 0.012:
        t = config_notice(gen, run, out, t)

    selection, forced = _selection(gen, run, step, final)
    emit(("model_selection", t, selection))
    selected = selection["selected_model"]
    profile = profile_of(selected)
    run.model = selected

    call_model = selected
    if forced and not profile.accepts_forced_tool_choice:
        t = tool_choice_refused(gen, out, t, selected, profile.provider)
    elif run.open_circuits:
        t = close_circuits(gen, run, out, t)
    elif rand() < 0.05:
        t, call_model = provider_trouble(gen, run, out, t, selected, profile.provider)

    # the classifier pick, or its failure
    kind, pick, served, narrowed = _pick(gen, run, step, final)
    t += pick["latencyMs"]
    emit((kind, t, pick))
    top = pick["ranked"][0]["name"] if kind == "tool_choice.pick" else None

    # what the model does with it
    turn_kind = _turn_kind(gen, run, step, final)
    called: list[str] = []  # action names of tool calls (control calls excluded)
    wires: list[str] = []
    if turn_kind == "action":
        called, wires = _calls(gen, run, served, top, narrowed, call_model)

    # the model call
    call_profile = profile_of(call_model)
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
    turn = _turn(gen, run, turn_kind, wires, called, duration, truncated, cost)
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
        run.sub_start_ms = gen.abs_ms(run, t)

    # gated calls go to the classifier ladder
    for name in called[:2]:
        if name in plan.gated:
            t = ladder(gen, run, out, t, name)

    if rand() < 0.01:  # a code this version of Decisionboard does not know
        t += 1
        message = "context compacted before the next call"
        detail = {"messagesBefore": 2 + 2 * step, "messagesAfter": 6}
        detail["tokensSaved"] = tokens_in // 2
        emit(notice(t, "engine.context_compacted", "info", "developer", message, detail))
    run.t = t
    return out


def _selection(gen: Generation, run: Run, step: int, final: bool) -> tuple[dict, bool]:
    """The router's event for this step, and whether it forces a tool choice.

    Mostly the default model; sometimes a swap for one step, sometimes a retried step.
    """
    rng = gen.rng
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
    profile = profile_of(selected)
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


def _pick(gen: Generation, run: Run, step: int, final: bool) -> tuple[str, dict, list[str], bool]:
    """The classifier's ranking and what was served, or the failure that served it all.

    Returns the record's kind, its data, the served tools and whether they were narrowed.
    """
    rng = gen.rng
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

    latency = round(rng.lognormvariate(math.log(classifier.latency[0]), classifier.latency[1]), 1)
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
    gen: Generation, run: Run, served: list[str], top: str | None, narrowed: bool, model: str
) -> tuple[list[str], list[str]]:
    """The tools the model calls: action names for the outcome, wire names for the turn.

    Mostly the classifier's top pick; otherwise another served tool, a door, a tool that
    narrowing left out (a miss) or, now and then, one no harness ever offered (invented).
    """
    rng = gen.rng
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
    if rand() < profile_of(model).invents:
        invented = rng.choice(INVENTED)
        if rand() < 0.5:
            called.insert(0, invented)
            wires.insert(0, invented)
        else:
            called.append(invented)
            wires.append(invented)
    return called, wires


def _turn_kind(gen: Generation, run: Run, step: int, final: bool) -> str:
    if run.sub is not None and step == run.sub_step:
        return "subAgent"
    if final:
        return "taskComplete"
    r = gen.rng.random()
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
    gen: Generation,
    run: Run,
    kind: str,
    wires: list[str],
    called: list[str],
    duration: float,
    truncated: bool,
    cost: float,
) -> dict:
    rng = gen.rng
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

"""The classifier ladder: the verdicts on a gated tool call and the notices that go with them.

Rung 0 asks the run's classifier seat; a verdict that breaks the output contract is mostly
re-asked, then the call walks on to rung 1, the main model. Seats break their contract more often
during incidents, bad spells of the whole span (a bad deploy, an overloaded host).
"""

from __future__ import annotations

import math
import random

from records.demo.cast import INCIDENTS, profile_of
from records.demo.event_data import Event, notice
from records.demo.run_state import Generation, Run


def incident_windows(rng: random.Random, lo_ms: int, end_ms: int) -> list[tuple[int, int, str]]:
    """Windows in which a seat model breaks its contract most of the time.

    Streaks are counted in `ts` order across runs, so a bad spell must be a stretch of time
    (a bad deploy, an overloaded host), not a property of one run.
    """
    span = end_ms - lo_ms
    windows = []
    for model, count in INCIDENTS.items():
        for _ in range(count):
            length = max(1, span // 24)
            start = lo_ms + int(rng.random() * max(1, span - length))
            windows.append((start, start + length, model))
    return windows


def _break_chance(gen: Generation, run: Run, model: str, t: float) -> float:
    ms = gen.abs_ms(run, t)
    for lo, hi, bad in gen.incidents:
        if bad == model and lo <= ms < hi:
            return 0.6
    return profile_of(model).contract_break


def ladder(gen: Generation, run: Run, out: list[Event], t: float, tool: str) -> float:
    """One classification: rung 0 on the seat, a re-ask, then rung 1 on the main model."""
    rng = gen.rng
    rand = rng.random
    emit = out.append
    run.calls += 1
    call_id = f"call-{run.calls}"
    seat = run.seat_model
    main = run.model or run.plan.agent.main_model
    budget = 4000.0 if rand() < 0.7 else None
    block = 0.3 if tool in ("issue_refund", "run_shell", "run_python") else 0.1

    def verdict(t: float, model: str, rung: int, reask: bool, wall: float, result: dict) -> Event:
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
        median = profile_of(model).latency[0]
        return round(rng.lognormvariate(math.log(median * 2.5 + 200), 0.5), 1)

    def ruled() -> dict:
        return {"outcome": "ruled", "verdict": "block" if rand() < block else "allow"}

    p_break = _break_chance(gen, run, seat, t)
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
        emit(notice(t + 1, "classifier.unavailable", "warn", "user", message, detail))
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
    emit(notice(t + 1, "classifier.fallback", "warn", "operator", message, detail))
    if run.streak >= 2:
        message = f"{seat} broke the verdict contract {run.streak} times in a row"
        detail = {"model": seat, "streak": run.streak}
        emit(notice(t + 2, "classifier.contract_broken", "warn", "operator", message, detail))
    return t + 2

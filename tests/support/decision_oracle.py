"""An independent oracle for the fallbacks, sessions and notice-alert numbers, and its corpus.

Pure Python over the posted dicts only (never the derive code, the rollups, the key codec or the
run summaries), straight from the definitions, so a mistake in any of those shows as a difference.
The corpus spreads runs over sessions (and none), crosses minute and hour boundaries, swaps
models, walks classifier ladders (tests/support/oracle.py's classifications, arriving in any order),
files route and classifier fallback notices with and without detail, reliability events of
every type, and gives a session and a run hostile names.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import datetime, timedelta

from tests.support import oracle
from tests.support.factories import BASE_TS, record
from tests.support.oracle import bucket, iso, when

EVIL_SESSION = '<script>alert("session")</script>'
EVIL_RUN = "run-'\"<b>evil</b>"
EVIL_NOTICE = '<img src=x onerror=alert("notice")>'
MAINS = oracle.MAINS
SPAN = timedelta(hours=3)
CAUSES = ("route_fallback", "route_unroutable", "ladder", "classifier_fallback", "reliability",
          "router")  # fmt: skip


def build(runs: int = 24, seed: int = 5) -> list[dict]:
    rng = random.Random(seed)
    out: list[dict] = []
    n = 0
    for i in range(runs):
        run_id = EVIL_RUN if i == 3 else f"run-{i}"
        session = None if i % 7 == 6 else (EVIL_SESSION if i % 5 == 0 else f"sess-{i % 4}")
        env = {"run_id": run_id, "agent": rng.choice(oracle.AGENTS), "session_id": session}
        start = BASE_TS + timedelta(seconds=rng.uniform(0, SPAN.total_seconds() - 1800))
        if rng.random() < 0.3:  # a hair before a boundary
            start = start.replace(second=59, microsecond=990_000)
        t = start
        for iteration in range(rng.randint(1, 5)):
            t += timedelta(seconds=rng.uniform(1, 120))
            default = rng.choice(MAINS)
            selected = default if rng.random() < 0.6 else rng.choice([*MAINS, "gpt-5-mini"])
            out.append(record("model_selection", ts=iso(t), data={
                "step": iteration, "default_model": default, "selected_model": selected,
                "action": "select" if selected != default else "continue",
                "previous_model": rng.choice([None, default])}, **env))  # fmt: skip
            pick = oracle.pick_data(rng)
            pick.update(iteration=iteration, chosen=pick["offered"][0], narrowed=False,
                        served=list(pick["offered"]), ranked=[
                            {"name": name, "score": round(1 - k * 0.2, 2)}
                            for k, name in enumerate(pick["offered"][:3])],
                        usage={"inputTokens": rng.randrange(100, 900),
                               "outputTokens": rng.randrange(1, 20)})  # fmt: skip
            pick.pop("narrowedSkipped", None)
            out.append(record("tool_choice.pick", ts=iso(t), data=pick, **env))
            out.append(record("model_call", ts=iso(t + timedelta(seconds=1)), data={
                "iteration": iteration, "provider": "anthropic", "model": selected,
                "usage": {"input": rng.randrange(100, 5000), "output": rng.randrange(10, 500)},
                "stopReason": "toolUse", "durationMs": 900.0}, **env))  # fmt: skip
            roll = rng.random()
            moment = iso(t + timedelta(milliseconds=500))
            if roll < 0.2:
                cause = rng.choice(["timeout", "error", "rate-limit"])
                detail = {"seat": "classifier", "from": rng.choice(oracle.CLASSIFIERS),
                          "to": rng.choice(MAINS), "cause": cause}  # fmt: skip
                if rng.random() < 0.2:
                    detail["streak"] = 2
                out.append(record("notice", ts=moment, data={
                    "code": "route.fallback_to_primary", "level": "warn",
                    "message": EVIL_NOTICE, "detail": detail}, **env))  # fmt: skip
            elif roll < 0.3:
                out.append(record("notice", ts=moment, data={
                    "code": "route.classifier_unroutable", "level": "warn",
                    "message": "no route", "detail": {}}, **env))  # fmt: skip
            elif roll < 0.45:
                kind = rng.choice(["fallback_triggered", "retried", "fallback_triggered",
                                   "recovered", "fail_fast"])  # fmt: skip
                out.append(record("reliability", ts=moment, data={
                    "type": kind, "primary": "anthropic", "fallback": "openai", "attempt": 1,
                    "reason": "5xx", "errorKind": "5xx-transient"}, **env))  # fmt: skip
            elif roll < 0.55:
                out.append(record("notice", ts=moment, data={
                    "code": "classifier.role_defaulted", "level": "info", "message": "m",
                    "detail": {"reason": rng.choice(["tier_table", "main_only"]),
                               "model": "qwen3-8b"}}, **env))  # fmt: skip
            elif roll < 0.6:
                out.append(record("notice", ts=moment, data={
                    "code": "classifier.fallback", "level": "warn", "message": "no ruling",
                    "detail": {"from": "qwen3-8b", "to": default, "cause": "parse_error"}},
                    **env))  # fmt: skip
            if rng.random() < 0.35:
                n += 1
                out += oracle.classification_records(rng, 10_000 + n, env)
    return out


# --- the oracle ---------------------------------------------------------------------------------
def _has_fallback(r: dict) -> bool:
    d = r["data"]
    if r["kind"] == "classifier.verdict":
        return d["rung"] == 1 and not d["reask"]
    if r["kind"] == "notice":
        return d["code"] in (
            "classifier.fallback",
            "route.fallback_to_primary",
            "route.classifier_unroutable",
        )
    return r["kind"] == "reliability" and d["type"] == "fallback_triggered"


def _is_swap(r: dict) -> bool:
    return (
        r["kind"] == "model_selection" and r["data"]["selected_model"] != r["data"]["default_model"]
    )


def fallback_events(records: list[dict]) -> list[tuple[datetime, str, str | None]]:
    """(when it counts, cause, configured model) of every fallback event."""
    out = []
    for r in records:
        d = r["data"]
        if r["kind"] == "notice" and d["code"] == "route.fallback_to_primary":
            detail = d.get("detail") or {}
            out.append((when(r), "route_fallback", detail.get("model", detail.get("from"))))
        elif r["kind"] == "notice" and d["code"] == "route.classifier_unroutable":
            out.append((when(r), "route_unroutable", None))
        elif r["kind"] == "notice" and d["code"] == "classifier.fallback":
            out.append((when(r), "classifier_fallback", (d.get("detail") or {}).get("from")))
        elif r["kind"] == "reliability" and d["type"] == "fallback_triggered":
            out.append((when(r), "reliability", None))
        elif _is_swap(r):
            out.append((when(r), "router", d["default_model"]))
    for first, fell_back in oracle.classifications(records):
        if fell_back:
            d = first["data"]
            out.append((when(first), "ladder", d.get("seatModel") or d["model"]))
    return out


def fallback_counts(records: list[dict], interval: str, start: datetime, end: datetime) -> dict:
    """{cause: {bucket: count}} of the events in [start, end) (by bucket)."""
    out: dict[str, Counter] = {c: Counter() for c in CAUSES}
    for moment, cause, _ in fallback_events(records):
        b = bucket(moment, interval)
        if start <= b < end:
            out[cause][b] += 1
    return {c: dict(v) for c, v in out.items()}


def tokens(r: dict) -> tuple[int, int]:
    d = r["data"]
    if r["kind"] == "tool_choice.pick":
        usage = d.get("usage") or {}
        return usage.get("inputTokens") or 0, usage.get("outputTokens") or 0
    if r["kind"] == "model_call":
        return d["usage"]["input"], d["usage"]["output"]
    return 0, 0


def runs(records: list[dict]) -> dict[str, dict]:
    """Per run: first and last ts, session, agent, records, flags, kinds and tokens."""
    violating = set(oracle.violations(records))
    out: dict[str, dict] = {}
    for r in records:
        run = out.setdefault(r["run_id"], {
            "first": when(r), "last": when(r), "session": r.get("session_id"),
            "agent": r.get("agent"), "records": 0, "kinds": Counter(), "tokens": [0, 0],
            "swap": False, "fallback": False, "error": False, "contract_break": False,
            "violation": False})  # fmt: skip
        d = r["data"]
        run["first"], run["last"] = min(run["first"], when(r)), max(run["last"], when(r))
        run["records"] += 1
        run["kinds"][r["kind"]] += 1
        t_in, t_out = tokens(r)
        run["tokens"][0] += t_in
        run["tokens"][1] += t_out
        run["swap"] |= _is_swap(r)
        run["fallback"] |= _has_fallback(r)
        run["error"] |= (
            r["kind"] in ("tool_choice.pick_error", "provider.error")
            or (r["kind"] == "reliability" and d["type"] == "fail_fast")
            or (r["kind"] == "notice" and d.get("level") == "error")
            or (r["kind"] == "turn" and d.get("executionError") is not None)
        )
        run["contract_break"] |= (
            r["kind"] == "classifier.verdict" and d["outcome"] == "parse_error"
        ) or (r["kind"] == "notice" and d["code"] == "classifier.contract_broken")
        run["violation"] |= r["id"] in violating
        if r["kind"] == "notice" and d["code"] in oracle.ONCE_PER_RUN:
            # A once-per-run notice filed again: whichever arrived later breaks the contract.
            run["violation"] |= run["kinds"][("once", d["code"])] > 0
            run["kinds"][("once", d["code"])] += 1
    return out


def moved_runs(records: list[dict], start: datetime, end: datetime) -> tuple[int, int]:
    """(runs active in [start, end), those with a swap or a fallback)."""
    active = [r for r in runs(records).values() if r["last"] >= start and r["first"] < end]
    return len(active), sum(1 for r in active if r["swap"] or r["fallback"])


FLAGS = ("swap", "fallback", "error", "contract_break", "violation")


def sessions(records: list[dict]) -> dict[str, dict]:
    """Per session id: runs, records, runs with each flag, tokens, and the latest run's end."""
    out: dict[str, dict] = {}
    for run in runs(records).values():
        if run["session"] is None:
            continue
        s = out.setdefault(run["session"], {
            "runs": 0, "records": 0, "tokens": [0, 0], "last": run["last"],
            "flags": dict.fromkeys(FLAGS, 0), "picks": 0, "calls": 0})  # fmt: skip
        s["runs"] += 1
        s["records"] += run["records"]
        s["tokens"][0] += run["tokens"][0]
        s["tokens"][1] += run["tokens"][1]
        s["last"] = max(s["last"], run["last"])
        s["picks"] += run["kinds"]["tool_choice.pick"] + run["kinds"]["tool_choice.pick_error"]
        s["calls"] += run["kinds"]["model_call"]
        for flag in FLAGS:
            s["flags"][flag] += run[flag]
    return out


def session_order(records: list[dict]) -> list[str]:
    """Session ids, the one with the latest run first (ties: the later created run first is
    not knowable here, so the corpus has no ties)."""
    found = sessions(records)
    return sorted(found, key=lambda s: found[s]["last"], reverse=True)


def notice_count(
    records: list[dict], start: datetime, end: datetime, code: str, detail: dict[str, str],
    by: str = "",
) -> dict[str, int]:  # fmt: skip
    """Notices of `code` with ts in [start, end) whose detail fields read `detail` (as text),
    per group ("" ungrouped; by "model": detail.model, else detail.from)."""
    out: Counter = Counter()
    for r in records:
        d = r["data"]
        if r["kind"] != "notice" or d["code"] != code or not start <= when(r) < end:
            continue
        got = d.get("detail") or {}
        if any(str(got.get(k)) != v if k in got else True for k, v in detail.items()):
            continue
        group = ""
        if by == "model":
            group = got.get("model", got.get("from")) or ""
        elif by == "agent":
            group = r.get("agent") or ""
        out[group] += 1
    return dict(out)


def violation_rate(records: list[dict], start: datetime, end: datetime) -> tuple[float, int]:
    inside = [r for r in records if start <= when(r) < end]
    violating = set(oracle.violations(records))
    bad = sum(1 for r in inside if r["id"] in violating)
    return (bad / len(inside) if inside else 0.0), len(inside)


def chain(records: list[dict], run_id: str) -> Counter:
    """The causes of one run's chain, counted: a classification walks once (at its first
    rung-1 attempt, with or without a rung-0 attempt)."""
    out: Counter = Counter()
    walked = set()
    for r in sorted(records, key=when):
        if r["run_id"] != run_id:
            continue
        d = r["data"]
        if r["kind"] == "classifier.verdict" and d["rung"] == 1 and not d["reask"]:
            if d["toolCallId"] not in walked:
                walked.add(d["toolCallId"])
                out["ladder"] += 1
    for _, cause, _ in fallback_events([r for r in records if r["run_id"] == run_id]):
        if cause != "ladder":
            out[cause] += 1
    return out

"""An independent oracle for the tools pages, selection accuracy and the narrowing what-if, and
a corpus of tool decisions that tries to fool it.

The oracle reads only the posted dicts (never records.catchup.tool_funnel, the key codec or the
rollups) and applies the definitions of records.catchup.tool_funnel' docstring as written: a
decision is the earliest pick and the earliest outcome of one (run_id, iteration) by (ts, id);
chosen is the top-ranked tool; a miss is a called or wanted tool offered and not served; and so on.

The corpus has runs of several iterations whose pick and outcome fall on both sides of minute
and hour boundaries, iterations with only a pick, only an outcome or a pick error, re-filed
duplicates (an earlier one counts), unranked and unoffered calls, doors, confidences outside
[0, 1], turns with invented names and execution errors, and tool names that are markup.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from datetime import datetime, timedelta

from tests.support.factories import BASE_TS, record
from tests.support.oracle import iso, when

CLASSIFIERS = ("claude-haiku-4-5", "qwen3-8b")
AGENTS = ("support-bot", "billing-agent")
REASONS = ("unavailable", "too-few", "after-miss", "wrap-up")
EVIL = '<script>alert("tool")</script>'
QUOTED = 'it\'s "quoted" | 100%'
TOOLS = ("search_docs", "read_file", "grep", "send_email", "write_file", EVIL, QUOTED)
DOORS = ("read_skill", "present")
INVENTED = ("refund_now", "<img src=x onerror=alert(3)>")
SPAN = timedelta(hours=3)
QUERY_END = BASE_TS + SPAN + timedelta(hours=1)


def _moment(rng: random.Random) -> datetime:
    base = BASE_TS + timedelta(seconds=rng.uniform(0, SPAN.total_seconds() - 600))
    roll = rng.random()
    if roll < 0.3:
        base = base.replace(second=59, microsecond=rng.choice([900_000, 999_000]))
    elif roll < 0.4:
        base = base.replace(minute=59, second=59, microsecond=950_000)
    return base


def _pick(rng: random.Random, iteration: int, model: str) -> dict:
    offered = rng.sample(TOOLS, k=rng.randint(1, len(TOOLS)))
    ranked_names = offered[:]
    rng.shuffle(ranked_names)
    ranked_names = ranked_names[: rng.randint(0, len(offered))]
    scores = sorted((round(rng.random(), 3) for _ in ranked_names), reverse=True)
    narrowed = rng.random() < 0.6 and len(offered) > 2
    top = rng.randint(1, 3)
    served = (ranked_names[:top] if narrowed else offered[:]) + list(DOORS[: rng.randint(0, 2)])
    data = {
        "iteration": iteration,
        "source": "classifier",
        "classifier": {"name": "c", "model": model},
        "offered": offered,
        "ranked": [{"name": n, "score": s} for n, s in zip(ranked_names, scores, strict=True)],
        "confidence": rng.choice([rng.random(), rng.random(), -0.2, 1.3, 1.0, 0.0]),
        "latencyMs": rng.uniform(50, 900),
        "served": served,
        "narrowed": narrowed,
    }
    if ranked_names and rng.random() < 0.9:
        data["chosen"] = ranked_names[0]
    if not narrowed and rng.random() < 0.5:
        data["narrowedSkipped"] = rng.choice(REASONS)
    return data


def _outcome(rng: random.Random, iteration: int, pick: dict | None) -> dict:
    pool = list(TOOLS) + list(DOORS) + ["unknown_tool"]
    called = rng.sample(pool, k=rng.randint(0, 3))
    if pick and pick["ranked"] and rng.random() < 0.5:
        called = [pick["ranked"][0]["name"], *[c for c in called if c != pick["ranked"][0]["name"]]]
    data: dict = {"iteration": iteration, "called": called}
    roll = rng.random()
    if roll < 0.75 and called and pick and pick["ranked"]:
        data["firstAgrees"] = called[0] == pick["ranked"][0]["name"]
    elif roll < 0.85:
        data["firstAgrees"] = rng.random() < 0.5
    if rng.random() < 0.3:
        data["miss"] = {"wanted": rng.sample(TOOLS, k=rng.randint(1, 2))}
    return data


def _turn(rng: random.Random) -> dict:
    names = [*rng.sample(TOOLS, k=rng.randint(0, 2)), *rng.sample(INVENTED, k=rng.randint(0, 1))]
    data: dict = {
        "protocol": "hybrid",
        "toolCalls": [{"name": n} for n in names],
        "toolNameMap": {n: n for n in TOOLS},
        "controlToolMap": {"ask_billing": {"kind": "subAgent", "name": "billing"}},
    }
    if rng.random() < 0.2:
        data["toolCalls"].append({"name": "ask_billing"})
    if rng.random() < 0.8:
        data["durationMs"] = round(rng.lognormvariate(7, 0.6), 1)
    if rng.random() < 0.15:
        data["executionError"] = {"message": "tool failed"}
    if rng.random() < 0.1:
        data.pop("toolNameMap")  # no map: nothing is invented
    return data


def build(runs: int = 30, seed: int = 5) -> list[dict]:
    rng = random.Random(seed)
    out: list[dict] = []
    for r in range(runs):
        env = {"run_id": f"run-{r}", "agent": rng.choice(AGENTS)}
        model = rng.choice(CLASSIFIERS)
        for iteration in range(rng.randint(3, 12)):
            moment = _moment(rng)
            pick = None
            shape = rng.random()
            if shape < 0.8:
                pick = _pick(rng, iteration, model)
                out.append(record("tool_choice.pick", ts=iso(moment), data=pick, **env))
                if rng.random() < 0.08:  # re-filed: earlier or later, ranked otherwise
                    again = _pick(rng, iteration, model)
                    shift = timedelta(seconds=rng.choice([-70, -1, 1, 70]))
                    out.append(record("tool_choice.pick", ts=iso(moment + shift), data=again,
                                      **env))  # fmt: skip
            elif shape < 0.88:
                data = {"iteration": iteration, "classifier": {"name": "c", "model": model},
                        "message": "overloaded", "latencyMs": 3000.0,
                        "served": list(TOOLS)}  # fmt: skip
                out.append(record("tool_choice.pick_error", ts=iso(moment), data=data, **env))
            if rng.random() < 0.85:
                later = moment + timedelta(seconds=rng.uniform(0.05, 90))
                outcome = _outcome(rng, iteration, pick)
                out.append(record("tool_choice.outcome", ts=iso(later), data=outcome, **env))
                if rng.random() < 0.06:
                    again = _outcome(rng, iteration, pick)
                    out.append(record("tool_choice.outcome",
                                      ts=iso(later - timedelta(seconds=rng.uniform(0, 5))),
                                      data=again, **env))  # fmt: skip
            if rng.random() < 0.8:
                later = moment + timedelta(seconds=rng.uniform(0.05, 90))
                out.append(record("turn", ts=iso(later), data=_turn(rng), **env))
    return out


# --- the oracle -----------------------------------------------------------------------------------
def _first(records: list[dict]) -> dict:
    return min(records, key=lambda r: (when(r), r["id"]))


def decisions(records: list[dict]) -> list[tuple[dict, dict]]:
    """(pick record, outcome record) of each (run_id, iteration) that has both: the earliest of
    each kind."""
    picks, outcomes = defaultdict(list), defaultdict(list)
    for r in records:
        if r["kind"] == "tool_choice.pick":
            picks[(r["run_id"], r["data"]["iteration"])].append(r)
        elif r["kind"] == "tool_choice.outcome":
            outcomes[(r["run_id"], r["data"]["iteration"])].append(r)
    return [(_first(picks[k]), _first(outcomes[k])) for k in picks if k in outcomes]


def _in(r: dict, start: datetime, end: datetime, agents) -> bool:
    return start <= when(r) < end and (not agents or r.get("agent") in agents)


def funnel(records, start, end, agents=None) -> dict[str, dict[str, float]]:
    """{tool: {stage: count}} over picks, outcomes, turns and decisions in [start, end)."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in records:
        if not _in(r, start, end, agents):
            continue
        d = r["data"]
        if r["kind"] == "tool_choice.pick":
            offered = list(dict.fromkeys(d["offered"]))
            for name in offered:
                out[name]["offered"] += 1
                out[name]["served" if name in d["served"] else "narrowed_out"] += 1
                if d.get("narrowedSkipped"):
                    out[name]["skip:" + d["narrowedSkipped"]] += 1
            seen: list[str] = []
            for tool in d["ranked"]:
                if tool["name"] not in seen:
                    seen.append(tool["name"])
                    out[tool["name"]]["ranked"] += 1
                    out[tool["name"]]["rank_sum"] += len(seen)
                    out[tool["name"]]["score_sum"] += tool["score"]
            for name in set(d["served"]) - set(offered):
                out[name]["door"] += 1
            if d["ranked"]:
                out[d["ranked"][0]["name"]]["chosen"] += 1
        elif r["kind"] == "tool_choice.outcome":
            for name in set(d["called"]):
                out[name]["called"] += 1
        elif r["kind"] == "turn":
            mapped = d.get("toolNameMap")
            for call in d.get("toolCalls") or ():
                name = call["name"]
                if name in (d.get("controlToolMap") or {}):
                    continue
                action = (mapped or {}).get(name, name)
                out[action]["calls"] += 1
                if mapped is not None and name not in mapped:
                    out[action]["invented_calls"] += 1
                if d.get("executionError") is not None:
                    out[action]["error_calls"] += 1
    for pick, outcome in decisions(records):
        if not _in(pick, start, end, agents):
            continue
        p, o = pick["data"], outcome["data"]
        offered, served = set(p["offered"]), set(p["served"])
        for name in set(o["called"]):
            if name not in offered:
                out[name]["called_not_offered"] += 1
            elif name in served:
                out[name]["called_served"] += 1
            else:
                out[name]["called_narrowed_out"] += 1
        for name in set(o["called"]) | set((o.get("miss") or {}).get("wanted", ())):
            if name in offered and name not in served:
                out[name]["missed"] += 1
        if p["ranked"] and p["ranked"][0]["name"] in o["called"]:
            out[p["ranked"][0]["name"]]["chosen_called"] += 1
    return {name: dict(stages) for name, stages in out.items()}


def turn_durations(records, start, end, tool: str) -> list[float]:
    out = []
    for r in records:
        if r["kind"] != "turn" or not _in(r, start, end, None):
            continue
        d = r["data"]
        for call in d.get("toolCalls") or ():
            name = (d.get("toolNameMap") or {}).get(call["name"], call["name"])
            if call["name"] not in (d.get("controlToolMap") or {}) and name == tool:
                if d.get("durationMs") is not None:
                    out.append(d["durationMs"])
    return out


def missed_runs(records, tool: str) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for pick, outcome in decisions(records):
        p, o = pick["data"], outcome["data"]
        wanted = set(o["called"]) | set((o.get("miss") or {}).get("wanted", ()))
        if tool in wanted and tool in p["offered"] and tool not in p["served"]:
            out[pick["run_id"]] += 1
    return dict(out)


def _clip(c: float) -> float:
    return min(max(c, 0.0), 1.0)


def selection(records, by: str, interval: str) -> dict[tuple, dict]:
    """{(group, bucket): {"agree": (num, den), "chosen": (num, den)}}: by "model" (classifier)
    or "agent", bucketed by the pick's ts ("hour" or "minute")."""
    out: dict[tuple, dict] = defaultdict(lambda: {"agree": [0, 0], "chosen": [0, 0]})
    for pick, outcome in decisions(records):
        p, o = pick["data"], outcome["data"]
        group = p["classifier"]["model"] if by == "model" else pick["agent"]
        moment = when(pick).replace(second=0, microsecond=0)
        if interval == "hour":
            moment = moment.replace(minute=0)
        cell = out[(group, moment)]
        if o.get("firstAgrees") is not None:
            cell["agree"][0] += int(o["firstAgrees"])
            cell["agree"][1] += 1
        cell["chosen"][0] += int(bool(p["ranked"]) and p["ranked"][0]["name"] in o["called"])
        cell["chosen"][1] += 1
    return out


def calibration(records) -> dict[str, tuple[list[tuple[int, int, float, float]], float, int]]:
    """{classifier model: ([(bin, n, agreement, mean confidence)], ECE, n)}."""
    bins: dict[str, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for pick, outcome in decisions(records):
        agrees = outcome["data"].get("firstAgrees")
        if agrees is None:
            continue
        c = _clip(pick["data"]["confidence"])
        b = min(math.floor(c * 10), 9)
        bins[pick["data"]["classifier"]["model"]][b].append((c, agrees))
    out = {}
    for model, by_bin in bins.items():
        total = sum(len(v) for v in by_bin.values())
        rows = []
        ece = 0.0
        for b in sorted(by_bin):
            items = by_bin[b]
            acc = sum(a for _, a in items) / len(items)
            conf = sum(c for c, _ in items) / len(items)
            rows.append((b, len(items), acc, conf))
            ece += len(items) / total * abs(acc - conf)
        out[model] = (rows, ece, total)
    return out


def whatif(records, group_of=lambda pick: "all") -> dict[str, list[tuple[int, float, float]]]:
    """{group: [(N, miss rate, mean tools served)] for N in 1..largest offered set}: narrowing
    to the top N serves the first N offered names of ranked plus the pick's doors, or the full
    set once N reaches the number offered."""
    groups: dict[str, list] = defaultdict(list)
    for pick, outcome in decisions(records):
        if pick["data"]["offered"]:
            groups[group_of(pick)].append((pick["data"], outcome["data"]))
    out = {}
    for group, items in groups.items():
        largest = max(len(set(p["offered"])) for p, _ in items)
        points = []
        for n in range(1, largest + 1):
            missed = 0
            served_total = 0
            for p, o in items:
                offered = list(dict.fromkeys(p["offered"]))
                doors = set(p["served"]) - set(offered)
                if n >= len(offered):
                    top = set(offered)
                else:
                    ranked = [t["name"] for t in p["ranked"] if t["name"] in offered]
                    top = set(list(dict.fromkeys(ranked))[:n])
                served_total += len(top) + len(doors)
                if any(name in offered and name not in top for name in o["called"]):
                    missed += 1
            points.append((n, missed / len(items), served_total / len(items)))
        out[group] = points
    return out

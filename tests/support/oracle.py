"""An independent oracle for every metric, and a corpus that tries to fool it.

The oracle reads only the posted dicts: never the derive code, the rollups or the key codec, so a
mistake in any of them shows as a difference. Each metric is computed per time bucket (minute,
hour or day of each record's `ts`) and per group, in the API's shape: {group tuple: {bucket:
(value, count)}}, with the model of a record that names none as None.

The corpus crosses bucket boundaries on purpose (attempts of one classification on both sides of
a minute, an hour), holds pick errors without a model, hybrid turns whose text is an envelope,
refusals and overloads that carry a tool choice, every contract violation, and once-per-run
notices filed twice.
"""

from __future__ import annotations

import json
import math
import random
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from tests.support.factories import BASE_TS, record

CLASSIFIERS = ("claude-haiku-4-5", "qwen3-8b")
MAINS = ("claude-sonnet-4-5", "gpt-5")
AGENTS = ("support-bot", "billing-agent")
REASONS = ("unavailable", "too-few", "after-miss", "wrap-up")
TOOLS = ("search_docs", "read_file", "grep", "send_email")
SPAN = timedelta(hours=3)  # the corpus's records (classification attempts run a little past)
QUERY_END = BASE_TS + SPAN + timedelta(hours=1)
VIOLATION_CODES = (
    "chosen_not_offered", "ranked_not_offered", "ranked_repeated", "ranked_scores_rising",
    "ranked_tie_out_of_order", "unnarrowed_tool_not_served", "skipped_while_narrowed",
    "ruled_without_verdict", "verdict_without_ruling", "form_without_parse_error",
    "cause_without_unavailable", "disposition_without_unavailable", "notice_repeated_in_run",
)  # fmt: skip
ONCE_PER_RUN = {"classifier.role_defaulted", "config.auto_mode_classifier_fallback_invalid"}


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def when(r: dict) -> datetime:
    return datetime.fromisoformat(r["ts"].replace("Z", "+00:00"))


# --- the corpus ---------------------------------------------------------------------------------
def _moment(rng: random.Random) -> datetime:
    """A time in the corpus's span, often a hair before or after a minute or hour boundary."""
    roll = rng.random()
    # Attempts of a classification follow theirs by up to 100 s: stay clear of the end.
    base = BASE_TS + timedelta(seconds=rng.uniform(0, SPAN.total_seconds() - 300))
    if roll < 0.3:
        base = base.replace(second=59, microsecond=rng.choice([900_000, 999_000]))
    elif roll < 0.4:
        base = base.replace(minute=59, second=59, microsecond=950_000)
    return base


def pick_data(rng: random.Random) -> dict:
    offered = rng.sample(TOOLS, k=rng.randint(2, 4))
    ranked = [{"name": n, "score": round(1 - i * 0.2, 2)} for i, n in enumerate(offered[:3])]
    narrowed = rng.random() < 0.5
    served = offered[:2] + ["read_skill"] if narrowed else list(offered)
    data = {
        "classifier": {"name": "c", "model": rng.choice(CLASSIFIERS)},
        "offered": offered,
        "ranked": ranked,
        "chosen": offered[0],
        "served": served,
        "narrowed": narrowed,
        "latencyMs": rng.lognormvariate(5, 0.8),
    }
    if not narrowed and rng.random() < 0.6:
        data["narrowedSkipped"] = rng.choice(REASONS)
    breach = rng.random()
    if breach < 0.05:
        data["chosen"] = "not_offered_tool"
    elif breach < 0.08:
        data["ranked"] = list(reversed(ranked))
    elif breach < 0.10:
        data["ranked"] = ranked + [{"name": "phantom", "score": 0.0}]
    elif breach < 0.12:
        data["ranked"] = [ranked[0], dict(ranked[0], score=0.1)]
    elif breach < 0.14 and len(offered) > 1:
        data["ranked"] = [{"name": offered[1], "score": 0.5}, {"name": offered[0], "score": 0.5}]
    elif breach < 0.16:
        data["narrowed"], data["served"] = False, offered[:1]
        data.pop("narrowedSkipped", None)
    elif breach < 0.18:
        data["narrowed"], data["narrowedSkipped"] = True, "too-few"
    return data


def _pick_error(rng: random.Random) -> dict:
    classifier = {"name": "c"}
    if rng.random() < 0.7:
        classifier["model"] = rng.choice(CLASSIFIERS)
    data = {
        "classifier": classifier,
        "message": "overloaded",
        "latencyMs": rng.uniform(1000, 5000),
        "served": list(TOOLS),
    }
    if rng.random() < 0.5:
        data["narrowedSkipped"] = rng.choice(REASONS)
    return data


def _turn(rng: random.Random) -> dict:
    calls = [{"name": rng.choice(["search-docs", "refund_now", "ask_billing"])}]
    calls = calls[: rng.randrange(0, 2)]
    return {
        "protocol": rng.choice(["envelope", "hybrid", "implicit"]),
        "toolCalls": calls,
        "text": rng.choice(
            ["", "Done.", '{"taskComplete": true}', '{"nextStep": {"type": "Chat"}}', "{oops"]
        ),
        "toolNameMap": {"search-docs": "search_docs"},
        "controlToolMap": {"ask_billing": {"kind": "subAgent", "name": "billing"}},
    }


def _provider_error(rng: random.Random) -> dict:
    return rng.choice(
        [
            {"error": "UnsupportedToolChoiceError", "retryable": False},
            {"error": "UnsupportedToolChoiceError", "retryable": True, "status": 422},
            {"error": "BadRequestError", "status": 400, "retryable": False},
            {"error": "OverloadedError", "status": 529, "retryable": True},
            {"error": "BadRequestError", "status": 400, "retryable": True},
        ]
    ) | {
        "provider": rng.choice(["anthropic", "openai"]),
        "model": rng.choice(MAINS),
        **({"toolChoice": {"type": "any"}} if rng.random() < 0.7 else {}),
    }


def classification_records(rng: random.Random, n: int, env: dict) -> list[dict]:
    """The attempts of one classification: a rung-0 attempt (sometimes none, sometimes two),
    maybe a re-ask, maybe a walk on to rung 1 a moment later, across a boundary if it falls so."""
    seat = rng.choice(CLASSIFIERS)
    call_id = f"call-{n}"
    start = _moment(rng)
    attempts = []

    def attempt(moment, rung, reask, outcome, extra=None):
        extra = {k: v for k, v in (extra or {}).items() if v is not None}
        data = {
            "toolName": "send_email",
            "toolCallId": call_id,
            "model": seat if rung == 0 else rng.choice(MAINS),
            "seatModel": seat,
            "rung": rung,
            "reask": reask,
            "outcome": outcome,
            "seat": "think",
            "station": "leg",
            "wallMs": rng.uniform(50, 900),
            "verdict": None,  # (the factory's default verdict would not fit every outcome)
            **extra,
        }
        if outcome == "ruled" and "verdict" not in extra and not extra.get("bare"):
            data["verdict"] = rng.choice(["allow", "block"])
        data.pop("bare", None)
        attempts.append(record("classifier.verdict", ts=iso(moment), data=data, **env))

    shape = rng.random()
    if shape > 0.1:  # 10 %: the rung-0 attempt never arrives
        outcome = rng.choices(["ruled", "parse_error", "unavailable"], [5, 3, 1])[0]
        attempt(start, 0, False, outcome)
        if shape > 0.9:  # a second first attempt, earlier: it is the one that counts
            attempt(start - timedelta(seconds=rng.uniform(1, 90)), 0, False, "parse_error")
    walked = rng.random() < 0.4
    if rng.random() < 0.3:
        attempt(start + timedelta(milliseconds=150), 0, True, "parse_error")
    if walked:
        attempt(start + timedelta(milliseconds=rng.choice([200, 90_000])), 1, False, "ruled")
        if rng.random() < 0.3:
            attempt(start + timedelta(seconds=100), 1, True, "ruled")
    if rng.random() < 0.08:  # contradictory fields: stored and flagged
        attempt(
            start,
            0,
            True,
            *rng.choice(
                [
                    ("unavailable", {"verdict": "allow", "form": "missing"}),
                    ("ruled", {"bare": True}),
                    ("parse_error", {"cause": "timeout", "disposition": "asked"}),
                ]
            ),
        )
    return attempts


def build(n: int = 1500, seed: int = 11) -> list[dict]:
    rng = random.Random(seed)
    out: list[dict] = []
    for i in range(n):
        env = {
            "agent": rng.choice(AGENTS),
            "run_id": f"run-{rng.randrange(15)}",
        }
        roll = rng.random()
        moment = _moment(rng)
        if roll < 0.16:
            out.append(record("tool_choice.pick", ts=iso(moment), data=pick_data(rng), **env))
        elif roll < 0.24:
            out.append(
                record("tool_choice.pick_error", ts=iso(moment), data=_pick_error(rng), **env)
            )
        elif roll < 0.32:
            agrees = rng.choice([True, False, None])
            data = {"firstAgrees": agrees} if agrees is not None else {"firstAgrees": None}
            out.append(record("tool_choice.outcome", ts=iso(moment), data=data, **env))
        elif roll < 0.42:
            default = rng.choice(MAINS)
            selected = default if rng.random() < 0.6 else rng.choice(MAINS + CLASSIFIERS)
            data = {"default_model": default, "selected_model": selected}
            out.append(record("model_selection", ts=iso(moment), data=data, **env))
        elif roll < 0.60:
            out.extend(classification_records(rng, i, env))
        elif roll < 0.66:
            out.append(record("provider.error", ts=iso(moment), data=_provider_error(rng), **env))
        elif roll < 0.76:
            out.append(record("turn", ts=iso(moment), data=_turn(rng), **env))
        elif roll < 0.82:
            code = rng.choice([*sorted(ONCE_PER_RUN), "classifier.fallback"])
            detail = {
                "classifier.role_defaulted": {"reason": "tier_below_main", "model": "qwen3-8b"},
                "classifier.fallback": {"from": "qwen3-8b", "to": "gpt-5", "cause": "timeout"},
            }.get(code, {})
            data = {"code": code, "message": "m", "detail": detail}
            out.append(record("notice", ts=iso(moment), data=data, **env))
        else:
            data = {
                "provider": "anthropic",
                "model": rng.choice(MAINS),
                "durationMs": rng.lognormvariate(7, 0.5),
                "usage": {"input": rng.randrange(100, 5000), "output": rng.randrange(10, 500)},
            }
            out.append(record("model_call", ts=iso(moment), data=data, **env))
    return out


# --- the oracle ---------------------------------------------------------------------------------
def bucket(moment: datetime, interval: str) -> datetime:
    moment = moment.replace(second=0, microsecond=0)
    if interval == "minute":
        return moment
    moment = moment.replace(minute=0)
    return moment if interval == "hour" else moment.replace(hour=0)


def violations(records: list[dict]) -> dict[str, list[str]]:
    """{record id: violation codes}, straight from the definitions."""
    out: dict[str, list[str]] = {}
    for r in records:
        d, codes = r["data"], []
        if r["kind"] == "tool_choice.pick":
            offered = d["offered"]
            names = [t["name"] for t in d["ranked"]]
            scores = [t["score"] for t in d["ranked"]]
            if d.get("chosen") is not None and d["chosen"] not in offered:
                codes.append("chosen_not_offered")
            if any(n not in offered for n in names):
                codes.append("ranked_not_offered")
            if len(set(names)) < len(names):
                codes.append("ranked_repeated")
            if any(b > a for a, b in zip(scores, scores[1:], strict=False)):
                codes.append("ranked_scores_rising")
            pairs = zip(d["ranked"], d["ranked"][1:], strict=False)
            if any(
                a["score"] == b["score"]
                and a["name"] in offered
                and b["name"] in offered
                and offered.index(a["name"]) > offered.index(b["name"])
                for a, b in pairs
            ):
                codes.append("ranked_tie_out_of_order")
            if not d["narrowed"] and not set(offered) <= set(d["served"]):
                codes.append("unnarrowed_tool_not_served")
            if d["narrowed"] and d.get("narrowedSkipped"):
                codes.append("skipped_while_narrowed")
        elif r["kind"] == "classifier.verdict":
            ruled = d["outcome"] == "ruled"
            if ruled and d.get("verdict") is None:
                codes.append("ruled_without_verdict")
            if not ruled and d.get("verdict") is not None:
                codes.append("verdict_without_ruling")
            if d.get("form") is not None and d["outcome"] != "parse_error":
                codes.append("form_without_parse_error")
            if d.get("cause") is not None and d["outcome"] != "unavailable":
                codes.append("cause_without_unavailable")
            if d.get("disposition") is not None and d["outcome"] != "unavailable":
                codes.append("disposition_without_unavailable")
        if codes:
            out[r["id"]] = codes
    return out


def repeated_notices(arrival: list[dict]) -> set[str]:
    """Once-per-run notices after the first of their code in their run, in arrival order."""
    seen: set[tuple] = set()
    out = set()
    for r in arrival:
        if r["kind"] == "notice" and r["data"]["code"] in ONCE_PER_RUN:
            key = (r["run_id"], r["data"]["code"])
            if key in seen:
                out.add(r["id"])
            seen.add(key)
    return out


def classifications(records: list[dict]) -> list[tuple[dict, bool]]:
    """(first rung-0 attempt, fell back) of each (run_id, toolCallId) that has a rung-0 attempt."""
    attempts = defaultdict(list)
    for r in records:
        if r["kind"] == "classifier.verdict":
            attempts[(r["run_id"], r["data"]["toolCallId"])].append(r)
    out = []
    for rs in attempts.values():
        firsts = [r for r in rs if r["data"]["rung"] == 0 and not r["data"]["reask"]]
        if firsts:
            first = min(firsts, key=lambda r: (when(r), r["id"]))
            out.append((first, any(r["data"]["rung"] == 1 for r in rs)))
    return out


def is_refusal(d: dict) -> bool:
    if d["error"] == "UnsupportedToolChoiceError":
        return True
    return "toolChoice" in d and d.get("status") == 400 and d["retryable"] is False


def decision(d: dict) -> str:
    names = [c["name"] for c in d.get("toolCalls") or ()]
    control = [n for n in names if n in (d.get("controlToolMap") or {})]
    if control:
        return d["controlToolMap"][control[0]]["kind"]
    if names:
        return "action"
    text = (d.get("text") or "").strip()
    protocol = d.get("protocol") or "envelope"
    if not text:
        return "empty"
    if protocol == "implicit":
        return "taskComplete"
    try:
        envelope = json.loads(text)
    except ValueError:
        envelope = None
    if not isinstance(envelope, dict):
        return "unparseable"
    if envelope.get("taskComplete") is True:
        return "taskComplete"
    step = envelope.get("nextStep")
    if isinstance(step, dict) and isinstance(step.get("type"), str):
        return {"actions": "action", "sub-agent": "subAgent", "chat": "chat"}.get(
            step["type"].lower(), "other"
        )
    return "payloadChange" if envelope.get("payloadChangeRequest") else "other"


def lower_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[math.floor(q * (len(ordered) - 1))]


Series = dict[tuple, dict[datetime, tuple[float | None, int]]]


class Oracle:
    """Exact metrics from the posted records (in `arrival` order, which decides which notice of
    a run repeats)."""

    def __init__(self, arrival: list[dict]):
        self.records = arrival
        self.by_kind: dict[str, list[dict]] = defaultdict(list)
        for r in arrival:
            self.by_kind[r["kind"]].append(r)
        flagged = violations(arrival)
        for rid in repeated_notices(arrival):
            flagged.setdefault(rid, []).append("notice_repeated_in_run")
        self.violations = flagged

    # Each metric: (contributions, reducer). A contribution is (group, ts, x) where x is
    # (num, den) for a rate, a number for a count and a latency for a quantile.
    def _contributions(self, name: str, group_by: str | None) -> tuple[list, str]:
        k = self.by_kind
        picks = k["tool_choice.pick"] + k["tool_choice.pick_error"]

        def model_of_pick(r):
            return r["data"]["classifier"].get("model")

        if name.startswith("classifier_latency_p"):
            return [((model_of_pick(r),), when(r), r["data"]["latencyMs"]) for r in picks], "q"
        if name == "pick_error_rate":
            return [
                ((model_of_pick(r),), when(r), (r["kind"].endswith("error"), 1)) for r in picks
            ], "rate"
        if name == "narrowing_skip_rate":
            if group_by == "reason":
                return [
                    ((reason,), when(r), (r["data"].get("narrowedSkipped") == reason, 1))
                    for r in picks
                    for reason in REASONS
                ], "rate"
            return [
                ((model_of_pick(r),), when(r), (bool(r["data"].get("narrowedSkipped")), 1))
                for r in picks
            ], "rate"
        if name == "first_pick_agreement":
            return [
                ((), when(r), (r["data"]["firstAgrees"] is True, 1))
                for r in k["tool_choice.outcome"]
                if r["data"].get("firstAgrees") is not None
            ], "rate"
        if name == "swap_rate":
            return [
                (
                    (r["data"]["default_model"],),
                    when(r),
                    (r["data"]["selected_model"] != r["data"]["default_model"], 1),
                )
                for r in k["model_selection"]
            ], "rate"
        if name == "ladder_fallback_rate":
            return [
                ((f["data"].get("seatModel") or f["data"]["model"],), when(f), (fell, 1))
                for f, fell in classifications(self.records)
            ], "rate"
        if name == "verdicts":
            return [
                (
                    (r["data"]["model"], r["data"].get("verdict") or r["data"]["outcome"])
                    if r["data"]["outcome"] == "ruled"
                    else (r["data"]["model"], r["data"]["outcome"]),
                    when(r),
                    1,
                )
                for r in k["classifier.verdict"]
            ], "count"
        if name == "provider_errors":
            return [
                ((r["data"]["provider"], r["data"]["model"], r["data"]["error"]), when(r), 1)
                for r in k["provider.error"]
            ], "count"
        if name == "invented_tool_rate":
            out = []
            for r in k["turn"]:
                d = r["data"]
                control = d.get("controlToolMap") or {}
                names = [c["name"] for c in d.get("toolCalls") or ()]
                invented = any(n not in d["toolNameMap"] and n not in control for n in names)
                group = (decision(d), d.get("protocol") or "envelope")
                out.append((group, when(r), (invented, 1)))
            return out, "rate"
        if name == "model_call_latency_p95":
            return [
                ((r["data"]["provider"], r["data"]["model"]), when(r), r["data"]["durationMs"])
                for r in k["model_call"]
            ], "q"
        if name == "records":
            return [((r["kind"],), when(r), 1) for r in self.records], "count"
        if name == "violation_rate":
            if group_by == "code":
                return [
                    ((code,), when(r), (code in self.violations.get(r["id"], ()), 1))
                    for r in self.records
                    for code in VIOLATION_CODES
                ], "rate"
            return [
                ((_metric_model(r),), when(r), (r["id"] in self.violations, 1))
                for r in self.records
            ], "rate"
        raise KeyError(name)

    def series(self, name: str, interval: str, group_by: str | None = None) -> Series:
        contributions, reducer = self._contributions(name, group_by)
        cells: dict[tuple, dict[datetime, list]] = defaultdict(lambda: defaultdict(list))
        for group, ts, x in contributions:
            cells[group][bucket(ts, interval)].append(x)
        out: Series = {}
        for group, by_bucket in cells.items():
            out[group] = {t: _reduce(reducer, xs, name) for t, xs in by_bucket.items()}
        return out

    def totals(self, name: str, group_by: str | None = None, since=None, until=None) -> dict:
        contributions, reducer = self._contributions(name, group_by)
        cells: dict[tuple, list] = defaultdict(list)
        for group, ts, x in contributions:
            if (since is None or ts >= since) and (until is None or ts < until):
                cells[group].append(x)
        return {group: _reduce(reducer, xs, name) for group, xs in cells.items()}


def _metric_model(r: dict) -> str | None:
    """The model a metric groups a record by, for the per-model violation rate."""
    d = r["data"]
    kind = r["kind"]
    if kind.startswith("tool_choice.pick"):
        return d["classifier"].get("model")
    if kind == "model_selection":
        return d["default_model"]
    if kind in ("classifier.verdict", "provider.error", "model_call"):
        return d["model"]
    if kind == "notice":
        return d["detail"].get("model", d["detail"].get("from"))
    return None


def _reduce(reducer: str, xs: list, name: str) -> tuple[float | None, int]:
    if reducer == "count":
        return sum(xs), len(xs)
    if reducer == "rate":
        den = sum(d for _, d in xs)
        return (sum(n for n, _ in xs) / den if den else None), den
    q = int(name.rsplit("_p", 1)[1]) / 100
    return lower_rank(xs, q), len(xs)


def group_tuple(group: dict, fields: Iterable[str]) -> tuple:
    return tuple(group.get(f) for f in fields)


def approx(got: float | None, want: float | None, quantile: bool) -> bool:
    if got is None or want is None:
        return got is want
    if quantile:  # within 1 % relative error of the exact quantile
        return abs(got - want) <= 0.0101 * abs(want) + 1e-9
    return abs(got - want) <= 1e-9 * max(1.0, abs(want))


Compare = Callable[[float | None, float | None], bool]

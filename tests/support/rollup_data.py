"""A seeded mix of records for the rollup tests, and exact metrics computed straight from them.

The exact side reads only the posted dicts, never the rollups or the derive code, so a mistake
in either shows as a difference.
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta

from django.apps import apps

from records import catchup
from records.catchup.rebuild import reset_rollups
from records.contract.normalise import normalise
from records.models import (
    Classification,
    Project,
    Record,
    Rollup,
    Run,
    Streak,
    Watermark,
)
from records.store.writer import store_records
from tests.support.factories import BASE_TS, record

CLASSIFIERS = ("claude-haiku-4-5", "qwen3-8b")
# Why a ladder walked on: a parse error, the seat unavailable by its cause (or without one), or a
# ruling the ladder walked on from anyway.
LADDER_CAUSES = ("parse_error", "timeout", "error", "unavailable", "ruled")
MAINS = ("claude-sonnet-4-5", "gpt-5")
AGENTS = ("support-bot", "billing-agent")
REASONS = ("unavailable", "too-few", "after-miss", "wrap-up")


def _ts(rng: random.Random) -> str:
    moment = BASE_TS + timedelta(seconds=rng.uniform(0, 3 * 3600))
    return moment.isoformat().replace("+00:00", "Z")


def build(n: int = 1200, seed: int = 3) -> list[dict]:
    rng = random.Random(seed)
    # Picks and outcomes share a few iterations per run, so that outcomes join picks (the tool
    # decisions of records.catchup.tool_funnel); drawn apart, so the rest of the mix stays as it
    # was.
    iterations = random.Random(seed + 1)
    out = []
    for i in range(n):
        env = {
            "id": f"mix-{seed}-{i}",
            "ts": _ts(rng),
            "agent": rng.choice(AGENTS),
            "run_id": f"run-{rng.randrange(12)}",
        }
        roll = rng.random()
        classifier = rng.choice(CLASSIFIERS)
        if roll < 0.25:
            narrowed = rng.random() < 0.6
            data = {
                "classifier": {"name": "c", "model": classifier},
                "latencyMs": rng.lognormvariate(5 if classifier == CLASSIFIERS[0] else 6, 0.8),
                "narrowed": narrowed,
                "iteration": iterations.randrange(3),
            }
            if not narrowed and rng.random() < 0.8:
                data["narrowedSkipped"] = rng.choice(REASONS)
            out.append(record("tool_choice.pick", data=data, **env))
        elif roll < 0.32:
            out.append(
                record(
                    "tool_choice.pick_error",
                    data={
                        "classifier": {"name": "c", "model": classifier},
                        "latencyMs": rng.uniform(1000, 5000),
                    },
                    **env,
                )
            )
        elif roll < 0.42:
            agrees = rng.choice([True, False, None])
            data = {"firstAgrees": agrees} if agrees is not None else {"firstAgrees": None}
            data["iteration"] = iterations.randrange(3)
            out.append(record("tool_choice.outcome", data=data, **env))
        elif roll < 0.55:
            default = rng.choice(MAINS)
            selected = default if rng.random() < 0.7 else rng.choice(MAINS + CLASSIFIERS)
            out.append(
                record(
                    "model_selection",
                    data={"default_model": default, "selected_model": selected},
                    **env,
                )
            )
        elif roll < 0.72:
            out.append(record("classifier.verdict", data=_verdict(rng), **env))
        elif roll < 0.78:
            out.append(
                record(
                    "provider.error",
                    data={
                        "provider": rng.choice(["anthropic", "openai"]),
                        "model": rng.choice(MAINS),
                        "error": rng.choice(["UnsupportedToolChoiceError", "RateLimitError"]),
                    },
                    **env,
                )
            )
        elif roll < 0.88:
            calls = [
                {"name": rng.choice(["search-docs", "refund_now", "ask_billing"])}
                for _ in range(rng.randrange(0, 3))
            ]
            protocol = rng.choice(["envelope", "hybrid", "implicit"])
            out.append(
                record(
                    "turn",
                    data={
                        "protocol": protocol,
                        "toolCalls": calls,
                        "text": rng.choice(["", "Done."]),
                        "toolNameMap": {"search-docs": "search_docs"},
                        "controlToolMap": {"ask_billing": {"kind": "subAgent", "name": "billing"}},
                    },
                    **env,
                )
            )
        else:
            out.append(
                record(
                    "model_call",
                    data={
                        "provider": "anthropic",
                        "model": rng.choice(MAINS),
                        "durationMs": rng.lognormvariate(7, 0.5),
                        "usage": {
                            "input": rng.randrange(100, 5000),
                            "output": rng.randrange(10, 500),
                        },
                    },
                    **env,
                )
            )
    # Notices of a few codes (a separate stream of random numbers: the mix above is unchanged);
    # none of the once-per-run codes, whose repeats the catch-up flags (tests of their own).
    notices = random.Random(seed + 1)
    for i in range(n // 20):
        code = notices.choice(["route.fallback_to_primary", "classifier.unavailable", "x.y"])
        detail = {
            "seat": "c",
            "from": notices.choice(CLASSIFIERS),
            "to": "gpt-5",
            "cause": "timeout",
        }
        if code == "classifier.unavailable":
            detail = {"toolName": "send_email", "toolCallId": f"n-{i}", "disposition": "asked",
                      "cause": notices.choice(["timeout", "error"])}  # fmt: skip
        env = {
            "id": f"mix-{seed}-notice-{i}",
            "ts": _ts(notices),
            "agent": notices.choice(AGENTS),
            "run_id": f"run-{notices.randrange(12)}",
        }
        out.append(record("notice", data={"code": code, "message": "m", "detail": detail}, **env))
    return out


def _verdict(rng: random.Random) -> dict:
    model = rng.choice(CLASSIFIERS + MAINS)
    rung = 0 if model in CLASSIFIERS else 1
    outcome = rng.choices(["ruled", "parse_error", "unavailable"], [5, 3, 1])[0]
    data = {
        # A few classifications per run, so that their attempts meet (and cross buckets).
        "toolCallId": f"call-{rng.randrange(6)}",
        "model": model,
        "seatModel": rng.choice(CLASSIFIERS) if rung else model,
        "rung": rung,
        "reask": rng.random() < 0.2,
        "outcome": outcome,
        "wallMs": rng.uniform(50, 900),
        "verdict": None,
    }
    if outcome == "ruled":
        data["verdict"] = rng.choice(["allow", "block"])
    elif outcome == "unavailable":
        cause = rng.choice(["timeout", "error", None])
        if cause:
            data["cause"] = cause
    return data


# --- exact answers ---------------------------------------------------------------------------
def _lower_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[math.floor(q * (len(ordered) - 1))]


def exact(records: list[dict]) -> dict:
    by_kind = defaultdict(list)
    for r in records:
        by_kind[r["kind"]].append(r)
    out = {}
    picks, errors = by_kind["tool_choice.pick"], by_kind["tool_choice.pick_error"]
    latencies = defaultdict(list)
    for r in picks + errors:
        latencies[r["data"]["classifier"].get("model", "")].append(r["data"]["latencyMs"])
    for q in (0.5, 0.95, 0.99):
        out[f"classifier_latency_p{int(q * 100)}"] = {
            m: (_lower_rank(v, q), len(v)) for m, v in latencies.items()
        }
    out["pick_error_rate"] = {
        m: (
            sum(1 for r in errors if r["data"]["classifier"]["model"] == m) / len(latencies[m]),
            len(latencies[m]),
        )
        for m in latencies
    }
    # Picks and pick errors alike.
    out["narrowing_skip_rate"] = {}
    for m in CLASSIFIERS:
        mine = [r for r in picks + errors if r["data"]["classifier"]["model"] == m]
        skipped = [r for r in mine if r["data"].get("narrowedSkipped")]
        out["narrowing_skip_rate"][m] = (len(skipped) / len(mine), len(mine))
    out["narrowing_skip_rate_by_reason"] = {
        reason: (
            sum(1 for r in picks + errors if r["data"].get("narrowedSkipped") == reason)
            / len(picks + errors),
            len(picks + errors),
        )
        for reason in REASONS
    }
    present = [
        r for r in by_kind["tool_choice.outcome"] if r["data"].get("firstAgrees") is not None
    ]
    out["first_pick_agreement"] = (
        sum(1 for r in present if r["data"]["firstAgrees"]) / len(present),
        len(present),
    )
    out["swap_rate"] = {}
    for m in MAINS:
        mine = [r for r in by_kind["model_selection"] if r["data"]["default_model"] == m]
        swaps = [r for r in mine if r["data"]["selected_model"] != m]
        out["swap_rate"][m] = (len(swaps) / len(mine), len(mine))
    verdict_mix = Counter()
    for r in by_kind["classifier.verdict"]:
        d = r["data"]
        verdict_mix[(d["model"], d["verdict"] or d["outcome"])] += 1
    ladder = defaultdict(Counter)
    for first, fell_back in classifications(records).values():
        seat = first["data"].get("seatModel") or first["data"]["model"]
        ladder[seat]["all"] += 1
        ladder[seat]["fell_back"] += fell_back
    out["ladder_fallback_rate"] = {
        m: (c["fell_back"] / c["all"], c["all"]) for m, c in ladder.items()
    }
    causes = Counter(ladder_causes(records).values())
    counted = len(classifications(records))
    out["ladder_fallback_rate_by_cause"] = {
        cause: (causes[cause] / counted, counted) for cause in LADDER_CAUSES
    }
    out["verdicts"] = dict(verdict_mix)
    out["provider_errors"] = Counter(
        (r["data"]["provider"], r["data"]["model"], r["data"]["error"])
        for r in by_kind["provider.error"]
    )
    invented = defaultdict(lambda: [0, 0])
    for r in by_kind["turn"]:
        d = r["data"]
        names = [c["name"] for c in d["toolCalls"]]
        control = [n for n in names if n in d["controlToolMap"]]
        if control:
            decision = d["controlToolMap"][control[0]]["kind"]
        elif names:
            decision = "action"
        elif not d["text"].strip():
            decision = "empty"
        else:
            decision = "taskComplete" if d["protocol"] == "implicit" else "unparseable"
        is_invented = any(n not in d["toolNameMap"] and n not in d["controlToolMap"] for n in names)
        cell = invented[(decision, d["protocol"])]
        cell[0] += is_invented
        cell[1] += 1
    out["invented_tool_rate"] = {k: (v[0] / v[1], v[1]) for k, v in invented.items()}
    calls = defaultdict(list)
    for r in by_kind["model_call"]:
        calls[r["data"]["model"]].append(r["data"]["durationMs"])
    out["model_call_latency_p95"] = {m: (_lower_rank(v, 0.95), len(v)) for m, v in calls.items()}
    out["records"] = Counter(r["kind"] for r in records)
    return out


def _when(r: dict) -> datetime:
    return datetime.fromisoformat(r["ts"].replace("Z", "+00:00"))


def classifications(records: list[dict]) -> dict[tuple, tuple[dict, bool]]:
    """A classification is one (run_id, toolCallId); it counts at its first rung-0
    attempt (rung 0, not a re-ask) and fell back when any attempt on rung 1 exists.
    {(run, call): (first rung-0 attempt, fell back)}, classifications without one left out."""
    attempts = defaultdict(list)
    for r in records:
        if r["kind"] == "classifier.verdict":
            attempts[(r["run_id"], r["data"]["toolCallId"])].append(r)
    out = {}
    for key, rs in attempts.items():
        firsts = [r for r in rs if r["data"]["rung"] == 0 and not r["data"]["reask"]]
        if firsts:
            first = min(firsts, key=lambda r: (_when(r), r["id"]))
            out[key] = (first, any(r["data"]["rung"] == 1 for r in rs))
    return out


def ladder_causes(records: list[dict]) -> dict[tuple, str]:
    """{(run, call): cause} of the counted classifications that fell back: what the seat's last
    attempt (rung 0, a re-ask too, the latest by time and record key) came to."""
    out = {}
    for key, (_, fell_back) in classifications(records).items():
        if not fell_back:
            continue
        seat = [
            r
            for r in records
            if r["kind"] == "classifier.verdict"
            and (r["run_id"], r["data"]["toolCallId"]) == key
            and r["data"]["rung"] == 0
        ]
        d = max(seat, key=lambda r: (_when(r), r["id"]))["data"]
        if d["outcome"] == "parse_error":
            out[key] = "parse_error"
        elif d["outcome"] == "unavailable":
            out[key] = d.get("cause") or "unavailable"
        else:
            out[key] = "ruled"
    return out


def exact_streaks(records: list[dict]) -> dict:
    verdicts = sorted(
        (r for r in records if r["kind"] == "classifier.verdict"),
        key=lambda r: (datetime.fromisoformat(r["ts"].replace("Z", "+00:00")), r["id"]),
    )
    state = {}
    for r in verdicts:
        d = r["data"]
        s = state.setdefault(d["model"], {"current": 0, "longest": 0, "last_broken_at": None})
        if d["outcome"] == "parse_error":
            s["current"] += 1
            s["longest"] = max(s["longest"], s["current"])
            s["last_broken_at"] = r["ts"]
        elif d["outcome"] == "ruled":
            s["current"] = 0
    return state


def rollup_snapshot(project):
    rollups = sorted(
        (
            r.grain,
            r.bucket,
            r.kind,
            r.agent,
            r.model,
            r.key,
            r.count,
            r.tokens_in,
            r.tokens_out,
            round(r.latency_sum, 6),
            sorted(r.sketch.items()),  # {"z": zeros, "<bin>": count, ...} (records.contract.sketch)
            r.cost_nano,
            r.cost_records,
            r.cost_unknown,
        )
        for r in Rollup.objects.filter(project=project)
    )
    streaks = sorted(
        Streak.objects.filter(project=project).values_list(
            "model", "current", "longest", "last_broken_at"
        )
    )
    runs = sorted(
        Run.objects.filter(project=project).values_list(
            "run_id",
            "agent",  # the greatest of its records' (records.catchup.upserts.merge_runs)
            "kind_counts",
            "models_seen",
            "has_swap",
            "has_fallback",
            "has_error",
            "has_contract_break",
            "has_violation",
            "cost_nano",
            "cost_unknown",
        ),
        key=lambda r: r[0],
    )
    classifications = sorted(
        Classification.objects.filter(project=project).values_list(
            "run_id",
            "tool_call_id",
            "first_ts",
            "first_key",
            "seat_model",
            "agent",
            "fell_back",
            "seat_ts",
            "seat_key",
            "cause",
        )
    )
    return rollups, streaks, runs, classifications


def forget_rollups(project):
    """What a rebuild does (records.catchup.rebuild.reset_rollups): everything the pass keeps,
    gone."""
    reset_rollups({model.__name__: model for model in apps.get_app_config("records").get_models()})
    # Back to just before the project's first record (ids don't restart between tests).
    first = Record.objects.filter(project=project).order_by("id").values_list("id", flat=True)[0]
    # Created if no pass ran yet: a catch-up would otherwise start its lanes at id 0.
    Watermark.objects.update_or_create(name=catchup.WATERMARK, defaults={"last_id": first - 1})
    return first - 1


def store_now(project: Project, records: list[dict]) -> None:
    rows = [normalise(raw, now=LANES_NOW) for raw in records]
    store_records(project.pk, rows, LANES_NOW)


def start_at(last_id: int, lanes: int = 1) -> None:
    """The lanes as a fresh installation's at `last_id` (ids do not restart between tests)."""
    catchup.lane_watermarks().delete()
    Watermark.objects.bulk_create(
        Watermark(name=catchup.lane_name(lane, lanes), last_id=last_id) for lane in range(lanes)
    )


def newest_id() -> int:
    return Record.objects.order_by("-id").values_list("id", flat=True).first() or 0


LANES_NOW = datetime(2026, 11, 21, tzinfo=UTC)

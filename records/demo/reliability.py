"""Notices about the classifier's route and configuration, provider errors, and what the
reliability layer does about them: retries, fallbacks, fail-fasts and circuits.
"""

from __future__ import annotations

import math

from records.demo.cast import FALLBACKS
from records.demo.event_data import (
    Event,
    circuit,
    fail_fast,
    fallback,
    notice,
    provider_error,
    recovered,
    retried,
)
from records.demo.run_state import Generation, Run

# fmt: off
_ROLE_REASONS = ("tier_below_main", "tier_table", "role_fallback", "main_only",
                 "role_unresolvable")
_ROUTE_CAUSES = ("credential_url_mismatch", "provider_unreachable", "model_not_served")
# fmt: on


def run_notices(gen: Generation, run: Run, out: list[Event], t: float) -> float:
    """How the classifier seat was resolved, announced when the run starts."""
    rng = gen.rng
    main = run.plan.agent.main_model
    r = rng.random()
    if r < 0.1:
        message = "no classifier role named a model; using a default"
        detail = {"reason": rng.choice(_ROLE_REASONS), "model": run.seat_model}
        out.append(notice(t, "classifier.role_defaulted", "info", "operator", message, detail))
    elif r < 0.16 and run.seat_model != main:
        message = "classifier route is unusable; the main model classifies"
        detail = {
            "seat": "classifier",
            "from": run.seat_model,
            "to": main,
            "cause": rng.choice(_ROUTE_CAUSES),
        }
        out.append(notice(t, "route.fallback_to_primary", "warn", "operator", message, detail))
        run.seat_model = main
    elif r < 0.2:
        t = config_notice(gen, run, out, t)
    return t + 1


def config_notice(gen: Generation, run: Run, out: list[Event], t: float) -> float:
    if gen.rng.random() < 0.5:
        message = f"no route serves the classifier model {run.seat_model}"
        detail = {"seat": "classifier", "model": run.seat_model}
        out.append(notice(t, "route.classifier_unroutable", "error", "operator", message, detail))
    else:
        message = "autoMode.classifierFallback names an unknown model; ignoring it"
        detail = {
            "setting": "autoMode.classifierFallback",
            "value": "gpt-4-legacy",
            "using": run.plan.agent.main_model,
        }
        code = "config.auto_mode_classifier_fallback_invalid"
        out.append(notice(t, code, "warn", "developer", message, detail))
    return t + 1


def tool_choice_refused(
    gen: Generation, out: list[Event], t: float, model: str, provider: str
) -> float:
    t += gen.rng.lognormvariate(math.log(250.0), 0.4)
    message = "tool_choice forcing a tool is not supported with extended thinking"
    error = provider_error("UnsupportedToolChoiceError", provider, model, False, 400, message)
    error["toolChoice"] = {"type": "tool", "name": "present"}
    out.append(("provider.error", t, error))
    reason = "forced tool choice refused; retrying without it"
    out.append(("reliability", t + 1, fail_fast("schema-fail", reason, provider)))
    return t + 1


def close_circuits(gen: Generation, run: Run, out: list[Event], t: float) -> float:
    for provider in run.open_circuits:
        t += 1
        out.append(("reliability", t, circuit("half-open", "cool-down elapsed", provider)))
        t += gen.rng.lognormvariate(math.log(400.0), 0.3)
        out.append(("reliability", t, circuit("closed", "probe succeeded", provider)))
    run.open_circuits = []
    return t


def provider_trouble(
    gen: Generation, run: Run, out: list[Event], t: float, model: str, provider: str
) -> tuple[float, str]:
    """A failed provider request and what the reliability layer did about it.

    Returns the new clock and the model that finally served the call.
    """
    rng = gen.rng
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
                provider_error("RateLimitError", provider, model, True, 429, message),
            )
        )
        t += rng.uniform(1000, 4000)  # the backoff
        retry = retried(1, "rate-limit", provider, provider, "retry-same", message)
        emit(("reliability", t, retry))
        emit(("reliability", t + 1, recovered(2, "retry", provider)))
        return t + 1, model
    if scenario == "connection":
        message = "connection reset by peer"
        emit(
            (
                "provider.error",
                t,
                provider_error("APIConnectionError", provider, model, True, None, message),
            )
        )
        t += rng.uniform(200, 1000)
        emit(("reliability", t, retried(1, "unknown", provider, other, "retry-other", message)))
        emit(("reliability", t + 1, recovered(2, "retry-other", other)))
        return t + 1, other_model
    if scenario == "overloaded":
        status = 529 if provider == "anthropic" else 503
        message = f"{status} overloaded"
        emit(
            (
                "provider.error",
                t,
                provider_error("OverloadedError", provider, model, True, status, message),
            )
        )
        t += rng.uniform(500, 2000)
        retry = retried(1, "5xx-transient", provider, provider, "retry-same", message)
        emit(("reliability", t, retry))
        t += rng.uniform(500, 2000)
        reason = f"{message} after 2 attempts"
        emit(("reliability", t, fallback(provider, other, "5xx-transient", reason)))
        emit(("reliability", t + 1, recovered(3, "fallback", other)))
        return t + 1, other_model
    # A run of server errors opens the circuit: calls fail fast and go to the fallback until
    # the next iteration closes it again.
    message = "500 internal server error"
    emit(
        (
            "provider.error",
            t,
            provider_error("InternalServerError", provider, model, True, 500, message),
        )
    )
    emit(("reliability", t + 1, circuit("open", "5 consecutive failures", provider)))
    reason = f"circuit open for {provider}"
    emit(("reliability", t + 2, fail_fast("circuit-open", reason, provider)))
    emit(("reliability", t + 3, fallback(provider, other, "circuit-open", "circuit open")))
    run.open_circuits.append(provider)
    return t + 3, other_model

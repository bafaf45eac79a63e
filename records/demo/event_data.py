"""The data of the records that several of the generator's record families file: notices,
provider errors and the reliability layer's events, in the field names the frameworks post.

An Event is what a family yields before it becomes a record: its kind, the run's natural
milliseconds since it started (records.demo.generator scales them into the span), and its data.
"""

from __future__ import annotations

Event = tuple[str, float, dict]  # kind, natural ms, data


def notice(t: float, code: str, level: str, audience: str, message: str, detail: dict) -> Event:
    data = {"code": code, "level": level, "audience": audience, "message": message}
    data["detail"] = detail
    return ("notice", t, data)


def provider_error(
    error: str, provider: str, model: str, retryable: bool, status: int | None, message: str
) -> dict:
    data: dict = {"error": error, "provider": provider, "model": model, "retryable": retryable}
    if status is not None:
        data["status"] = status
    data["message"] = message
    return data


def retried(
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


def recovered(attempt: int, via: str, provider: str) -> dict:
    return {
        "type": "recovered",
        "attempt": attempt,
        "errorKind": "ok",
        "recoveredVia": via,
        "providerName": provider,
    }


def fallback(primary: str, fallback: str, error_kind: str, reason: str) -> dict:
    return {
        "type": "fallback_triggered",
        "primary": primary,
        "fallback": fallback,
        "errorKind": error_kind,
        "reason": reason,
    }


def fail_fast(error_kind: str, reason: str, provider: str) -> dict:
    return {
        "type": "fail_fast",
        "errorKind": error_kind,
        "reason": reason,
        "providerName": provider,
    }


def circuit(state: str, reason: str, provider: str) -> dict:
    return {"type": "circuit_changed", "state": state, "reason": reason, "providerName": provider}

"""model_call on the pages: the provider, model and stop reason, with the call's size."""

from __future__ import annotations

from records.contract.renderings.kind_rendering import (
    Description,
    Rendering,
    details,
    millis,
    text_of,
)


def describe_model_call(d: dict, der: dict) -> Description:
    usage = d.get("usage") or {}
    tokens = f"{usage.get('input', 0):,} in / {usage.get('output', 0):,} out"
    return (
        f"{text_of(d.get('provider'))} {text_of(d.get('model'))}: {text_of(d.get('stopReason'))}",
        details(
            ("duration", millis(d.get("durationMs"))),
            ("tokens", tokens if isinstance(usage, dict) and usage else ""),
            ("tools", d.get("toolsCount")),
            ("messages", d.get("messagesCount")),
        ),
    )


MODEL_CALL_RENDERING = Rendering(describe_model_call)

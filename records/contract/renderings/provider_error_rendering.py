"""provider.error on the pages: who refused or failed the request, and how."""

from __future__ import annotations

from records.contract.renderings.kind_rendering import Description, Rendering, details, text_of


def describe_provider_error(d: dict, der: dict) -> Description:
    choice = d.get("toolChoice") or {}
    forced = (
        f"{text_of(choice.get('type'))} {text_of(choice.get('name'))}".strip() if choice else ""
    )
    return (
        f"{text_of(d.get('provider'))} {text_of(d.get('model'))}: {text_of(d.get('error'))}",
        details(
            ("message", d.get("message")),
            ("status", d.get("status")),
            ("retryable", "yes" if d.get("retryable") else "no"),
            ("refused tool choice", forced if der.get("tool_choice_refused") else ""),
        ),
    )


PROVIDER_ERROR_RENDERING = Rendering(describe_provider_error)

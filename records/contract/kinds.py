"""The registry of record kinds: one entry per kind.

The ingest path, the API docs and the tests all read this table; adding a kind is one Struct in
`records.contract.schema`, one function in `records.contract.derive` and one line here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from msgspec import Struct

from records.contract import derive, schema


@dataclass(frozen=True)
class KindSpec:
    name: str
    data_type: type[Struct]
    envelope: type[schema.Envelope]
    derive: Callable[[Struct], derive.Derived]
    summary: str


def _spec(name: str, fn: Callable, summary: str) -> KindSpec:
    return KindSpec(name, schema.DATA_TYPES[name], schema.ENVELOPES[name], fn, summary)


KINDS: dict[str, KindSpec] = {
    spec.name: spec
    for spec in (
        _spec(
            "tool_choice.pick",
            derive.derive_pick,
            "One classifier pick, filed before the model call.",
        ),
        _spec(
            "tool_choice.pick_error",
            derive.derive_pick_error,
            "The classifier call failed; the full set was served.",
        ),
        _spec(
            "tool_choice.outcome",
            derive.derive_outcome,
            "What the model then called, and whether it agreed with the top pick.",
        ),
        _spec(
            "model_selection",
            derive.derive_model_selection,
            "One model-selection event per model-call step.",
        ),
        _spec(
            "turn",
            derive.derive_turn,
            "What the harness observed on the wire before normalisation.",
        ),
        _spec(
            "classifier.verdict",
            derive.derive_verdict,
            "One classification of a gated tool call on one rung of the ladder.",
        ),
        _spec("notice", derive.derive_notice, "An engine notice."),
        _spec(
            "provider.error",
            derive.derive_provider_error,
            "A provider refused or failed a request.",
        ),
        _spec("reliability", derive.derive_reliability, "Retry, fallback and circuit events."),
        _spec("model_call", derive.derive_model_call, "One model call."),
    )
}
KIND_NAMES = tuple(KINDS)

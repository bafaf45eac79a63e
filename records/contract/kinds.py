"""The registry of record kinds: one entry per kind, and what each kind provides.

The ingest path, the API docs, the pages and the tests all read this table. Adding a kind is:

- its Struct in `records.contract.schema` and its derived fields, a function in
  `records.contract.derive`;
- its rendering, a module of its own in `records.contract.renderings` (`<kind>_rendering.py`):
  the run page's description of a record (every kind has one), and where the kind takes part,
  its compare lanes and its chain role on the fallbacks page;
- one entry here, naming those three.

The pages (dashboard.queries.timeline, dashboard.views.compare, dashboard.views.fallbacks) loop
over this table: none of them names a kind to show it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from msgspec import Struct

from records.contract import derive, schema
from records.contract.renderings.classifier_verdict_rendering import VERDICT_RENDERING
from records.contract.renderings.kind_rendering import Rendering
from records.contract.renderings.model_call_rendering import MODEL_CALL_RENDERING
from records.contract.renderings.model_selection_rendering import SELECTION_RENDERING
from records.contract.renderings.notice_rendering import NOTICE_RENDERING
from records.contract.renderings.provider_error_rendering import PROVIDER_ERROR_RENDERING
from records.contract.renderings.reliability_rendering import RELIABILITY_RENDERING
from records.contract.renderings.tool_choice_outcome_rendering import OUTCOME_RENDERING
from records.contract.renderings.tool_choice_pick_error_rendering import PICK_ERROR_RENDERING
from records.contract.renderings.tool_choice_pick_rendering import PICK_RENDERING
from records.contract.renderings.turn_rendering import TURN_RENDERING


@dataclass(frozen=True)
class KindSpec:
    name: str
    data_type: type[Struct]
    envelope: type[schema.Envelope]
    derive: Callable[[Struct], derive.Derived]
    summary: str
    rendering: Rendering


def _spec(name: str, fn: Callable, summary: str, rendering: Rendering) -> KindSpec:
    return KindSpec(name, schema.DATA_TYPES[name], schema.ENVELOPES[name], fn, summary, rendering)


KINDS: dict[str, KindSpec] = {
    spec.name: spec
    for spec in (
        _spec(
            "tool_choice.pick",
            derive.derive_pick,
            "One classifier pick, filed before the model call.",
            PICK_RENDERING,
        ),
        _spec(
            "tool_choice.pick_error",
            derive.derive_pick_error,
            "The classifier call failed; the full set was served.",
            PICK_ERROR_RENDERING,
        ),
        _spec(
            "tool_choice.outcome",
            derive.derive_outcome,
            "What the model then called, and whether it agreed with the top pick.",
            OUTCOME_RENDERING,
        ),
        _spec(
            "model_selection",
            derive.derive_model_selection,
            "One model-selection event per model-call step.",
            SELECTION_RENDERING,
        ),
        _spec(
            "turn",
            derive.derive_turn,
            "What the harness observed on the wire before normalisation.",
            TURN_RENDERING,
        ),
        _spec(
            "classifier.verdict",
            derive.derive_verdict,
            "One classification of a gated tool call on one rung of the ladder.",
            VERDICT_RENDERING,
        ),
        _spec("notice", derive.derive_notice, "An engine notice.", NOTICE_RENDERING),
        _spec(
            "provider.error",
            derive.derive_provider_error,
            "A provider refused or failed a request.",
            PROVIDER_ERROR_RENDERING,
        ),
        _spec(
            "reliability",
            derive.derive_reliability,
            "Retry, fallback and circuit events.",
            RELIABILITY_RENDERING,
        ),
        _spec("model_call", derive.derive_model_call, "One model call.", MODEL_CALL_RENDERING),
    )
}
KIND_NAMES = tuple(KINDS)

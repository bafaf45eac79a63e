"""The OpenTelemetry route: a decision record as a `decisionboard.<kind>` span event.

Works with any span object that has `add_event(name, attributes, timestamp)` (the OpenTelemetry
API's Span); it imports nothing from OpenTelemetry itself. Export the spans with the OTLP/HTTP
exporter to Decisionboard's `/v1/traces` (docs/api.md, "OTLP", in the Decisionboard repository).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("decisionboard_client")
ENVELOPE = ("id", "run_id", "parent_run_id", "agent", "session_id")


def event_attributes(data: Mapping[str, Any], **envelope: str | None) -> dict[str, Any]:
    """The record's fields as span-event attributes, in the documented portable form: scalars
    as they are, lists and objects as JSON strings; envelope fields (id, run_id, parent_run_id,
    agent, session_id) as `decisionboard.<name>`; None left out."""
    attributes: dict[str, Any] = {}
    for key, value in data.items():
        if value is None:
            continue
        if isinstance(value, (list, tuple, dict)):
            attributes[key] = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        else:
            attributes[key] = value
    for name in ENVELOPE:
        value = envelope.get(name)
        if value is not None:
            attributes[f"decisionboard.{name}"] = value
    unknown = set(envelope) - set(ENVELOPE)
    if unknown:
        raise TypeError(f"unknown envelope fields: {', '.join(sorted(unknown))}")
    return attributes


def add_record_event(
    span: Any,
    kind: str,
    data: Mapping[str, Any],
    *,
    timestamp: int | None = None,
    **envelope: str | None,
) -> bool:
    """Add the record to `span` as the event `decisionboard.<kind>`; never raises.

    `timestamp` is in nanoseconds since the epoch (the event's time, the record's `ts`).
    """
    try:
        span.add_event(f"decisionboard.{kind}", event_attributes(data, **envelope), timestamp)
        return True
    except Exception as exc:  # never into the agent's code
        log.warning("decisionboard client: could not add a %s event: %r", kind, exc)
        return False

"""Span events named `decisionboard.<kind>`: one record of that kind each, its attributes the
kind's fields, fitted to the types the kind declares (records.contract.schema). Pure functions."""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import cache
from typing import Any

import msgspec
import orjson

from records.contract import schema
from records.contract.kinds import KIND_NAMES, KINDS
from records.formats.otlp_records import Mapped, Mapping, put_scope
from records.formats.otlp_spans import (
    PREFIX,
    AttributeReader,
    EventView,
    SpanView,
    Trace,
    timestamp,
)

_PREFIX_LENGTH = len(PREFIX)
ENVELOPE_NAMES = frozenset({"id", "run_id", "parent_run_id", "agent", "session_id", "release"})
_ENVELOPE_KEYS = {PREFIX + name: name for name in ENVELOPE_NAMES}
# What the span's scope gives a record when the event does not set it.
_SCOPE_NAMES = frozenset({"run_id", "parent_run_id", "agent", "session_id", "release"})


def record_event(span: SpanView, event: EventView, trace: Trace, mapping: Mapping) -> None:
    """A span event `decisionboard.<kind>` → one record of that kind.

    The event's attributes are the kind's `data` fields: scalars as attribute values, lists and
    objects as OTLP arrays / kvlists or as a JSON string, and a dotted key nests
    (`classifier.model` is data.classifier.model). Attributes under `decisionboard.` set the
    envelope of this record (id, run_id, parent_run_id, agent, session_id, release).
    """
    kind = event.name[len(PREFIX) :]
    if kind not in KINDS:
        mapping.reject(
            span, f"event {event.name}: unknown kind {kind!r}; one of {', '.join(KIND_NAMES)}"
        )
        return
    envelope, data = record_fields(event.reader, event.key_values, _kind_fields(kind))
    if not envelope.keys() <= ENVELOPE_NAMES:
        unknown = envelope.keys() - ENVELOPE_NAMES
        mapping.reject(
            span,
            f"event {event.name}[{event.index}]: unknown envelope attribute "
            f"{', '.join(PREFIX + u for u in sorted(unknown))}",
        )
        return
    raw: dict[str, Any] = {
        "id": f"otel:{span.trace_id}:{span.span_id}:{event.index}",
        "kind": kind,
        "ts": timestamp(event.time_ns) if event.time_ns else span.ended,
    }
    # The event's own envelope attributes win over the span's scope: when they name all of
    # it, the span's lineage is not walked for this record.
    if not _SCOPE_NAMES <= envelope.keys():
        put_scope(raw, trace.scope(span))
    raw.update(envelope)
    raw["data"] = data
    mapping.records.append(Mapped(span, raw, "", event))


def record_fields(
    reader: AttributeReader, key_values: Iterable, fields: dict[str, _Fit]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A decisionboard event's attributes as (envelope, data), read in one pass as
    AttributeReader.attributes reads them: `decisionboard.x` is the envelope's x, any other key
    a field of data, a dotted key nested (`classifier.model` is data.classifier.model), in
    order; data fitted to the kind's declared `fields` (see _fit)."""
    envelope: dict[str, Any] = {}
    data: dict[str, Any] = {}
    # Top-level fields fitted once all attributes are in: objects built from dotted keys,
    # and JSON text where a list or object is declared (a later dotted key replaces it).
    later: dict[str, None] = {}  # ordered and each once: _fit runs once on each value
    for kv in key_values:
        key = kv.key
        value = kv.value
        text = value.string_value
        if text:
            if "\x00" in text:
                reader.dirty = True
            value = text
        else:
            value = reader.value(value)
        fit = fields.get(key)
        if fit is not None and not fit.container:
            # A declared scalar, the usual attribute: only a double can change (to an int).
            data[key] = _fit(value, fit) if isinstance(value, float) else value
            continue
        if fit is not None:  # a declared list or object
            data[key] = value
            later[key] = None
        elif (name := _ENVELOPE_KEYS.get(key)) is not None:
            envelope[name] = value
            continue
        elif key.startswith(PREFIX):
            envelope[key[_PREFIX_LENGTH:]] = value
            continue
        elif "." in key:
            parts = key.split(".")
            _set_path(data, parts, value)
            later[parts[0]] = None
        else:
            data[key] = value  # undeclared: kept as it is
            continue
        # A declared list or object, whole or in parts: JSON text in it is parsed, and an
        # escaped NUL in that text becomes a NUL.
        if text and "\\u0000" in text:
            reader.dirty = True
    for key in later:
        fit = fields.get(key)
        if fit is not None and key in data:
            data[key] = _fit(data[key], fit)
    return envelope, data


def _set_path(target: dict, parts: list[str], value: Any) -> None:
    for part in parts[:-1]:
        child = target.get(part)
        if not isinstance(child, dict):
            child = target[part] = {}
        target = child
    target[parts[-1]] = value


# Fitting attribute values to the declared types: a JSON string where a list or object is
# declared is parsed, a whole double where an integer is declared becomes an integer. Only
# declared containers are parsed, so a text field whose value happens to be JSON (a turn's
# envelope text) stays text. What to do at each declared type is worked out once per type
# (a _Fit), not once per value: this runs for every attribute of every decisionboard event.
_CONTAINERS = (msgspec.inspect.ListType, msgspec.inspect.DictType, msgspec.inspect.StructType)


class _Fit:
    """How values declared as one type are fitted (see _fit)."""

    __slots__ = ("container", "integer", "fields", "values", "items")

    container: bool  # a list, object or struct is declared: a JSON string is parsed
    integer: bool  # an integer is declared: a whole double becomes an int
    fields: dict[str, _Fit] | None  # a struct: its fields by JSON name
    values: _Fit | None  # an object: its values
    items: _Fit | None  # a list: its items


# By id of the msgspec.inspect node; the nodes live as long as _type_info's cache.
_FITS: dict[int, _Fit] = {}


def _fit_for(node: Any) -> _Fit:
    fit = _FITS.get(id(node))
    if fit is not None:
        return fit
    fit = _FITS[id(node)] = _Fit()  # registered first, so a recursive type ends
    declared = _declared(node)
    fit.container = isinstance(declared, _CONTAINERS)
    fit.integer = isinstance(declared, msgspec.inspect.IntType)
    fit.fields = fit.values = fit.items = None
    if isinstance(declared, msgspec.inspect.StructType):
        fit.fields = {f.encode_name: _fit_for(f.type) for f in declared.fields}
    elif isinstance(declared, msgspec.inspect.DictType):
        fit.values = _fit_for(declared.value_type)
    elif isinstance(declared, msgspec.inspect.ListType):
        fit.items = _fit_for(declared.item_type)
    return fit


@cache
def _kind_fields(kind: str) -> dict[str, _Fit]:
    """The fields of the kind's data, by JSON name."""
    fields = _fit_for(_type_info(kind)).fields
    assert fields is not None  # every kind's data is a struct
    return fields


@cache
def _type_info(kind: str) -> Any:
    return msgspec.inspect.type_info(schema.DATA_TYPES[kind])


def _declared(node: Any) -> Any:
    """The one non-null member of an optional type (str | None → str)."""
    if isinstance(node, msgspec.inspect.UnionType):
        members = [t for t in node.types if not isinstance(t, msgspec.inspect.NoneType)]
        return members[0] if len(members) == 1 else node
    return node


def _fit(value: Any, fit: _Fit) -> Any:
    """`value` fitted to the declared type whose _Fit is `fit`."""
    if isinstance(value, str):
        if fit.container:
            parsed = json_or_text(value)
            # Parsed JSON is typed already (3 is an int): nothing below it to fit.
            return parsed if isinstance(parsed, (list, dict)) else value
        return value
    if isinstance(value, float):
        if fit.integer and math.isfinite(value) and value.is_integer():
            return int(value)
        return value
    if isinstance(value, dict):
        if fit.fields is not None:
            return _fit_object(value, fit.fields)
        if fit.values is not None:
            return {k: _fit(v, fit.values) for k, v in value.items()}
        return value
    if isinstance(value, list) and fit.items is not None:
        return [_fit(item, fit.items) for item in value]
    return value


def _fit_object(value: dict[str, Any], fields: dict[str, _Fit] | None) -> dict[str, Any]:
    """An object fitted to a struct's fields; undeclared keys are kept as they are."""
    if fields is None:
        return value
    out = {}
    for key, item in value.items():
        fit = fields.get(key)
        # What _fit would return unchanged needs no call: an undeclared field, a string where
        # no container is declared, an integer or a boolean (the usual attributes).
        if fit is None:
            out[key] = item
        elif isinstance(item, str):
            out[key] = _fit(item, fit) if fit.container else item
        elif isinstance(item, int):  # bool included
            out[key] = item
        else:
            out[key] = _fit(item, fit)
    return out


def json_or_text(value: Any) -> Any:
    """A JSON string parsed; a string that is not JSON, and any other value, as it is."""
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value

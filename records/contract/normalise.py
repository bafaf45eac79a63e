"""Validate and normalise posted records: raw JSON values in, rows for the store out.

`normalise()` is the one place where a record is judged. It validates the envelope and the kind's
payload against `records.contract.schema`, applies the rules a type cannot express (timestamps not
in the future, `data` size, known notice details), computes the derived fields, and names every
problem by its field path (`data.ranked[2].score`) in words an agent developer can act on.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import orjson

from records.contract import redaction, rollup_keys, schema
from records.contract.cost import Usage
from records.contract.kinds import KIND_NAMES, KINDS
from records.contract.redaction import Redactor

Errors = dict[str, list[str]]
# A guard against zero or garbage clocks (year 1, the Unix epoch) rather than a real limit.
EARLIEST_TS = datetime(2000, 1, 1, tzinfo=UTC)
# Arrays and objects inside each other in `data`, `data` itself included: the most orjson
# encodes, so the fast path and the scrub agree on what is too deep.
MAX_DEPTH = 254
TOO_DEEP = f"is nested more than {MAX_DEPTH} arrays and objects deep"


@dataclass(frozen=True, slots=True)
class Limits:
    max_data_bytes: int = 256 * 1024
    max_future: timedelta = timedelta(minutes=5)


@dataclass(slots=True)
class NormalisedRecord:
    record_key: str
    kind: str
    run_id: str
    ts: datetime
    session_id: str | None
    agent: str | None
    parent_run_id: str | None
    model: str | None
    iteration: int | None
    latency_ms: float | None
    skip_reason: str | None
    outcome: str | None
    is_swap: bool
    is_fallback: bool
    is_error: bool
    is_contract_break: bool
    rollup_key: str
    tokens_in: int | None
    tokens_out: int | None
    # "|a|b|" of every model the record names when it names more than `model`, else None.
    named_models: str | None
    has_violation: bool
    data_json: str
    derived_json: str
    # What ingest prices (records.store.ingest_pricing sets the two cost columns from it).
    usage: Usage | None = None
    cost_nano: int | None = None
    cost_source: str | None = None
    # What redaction replaced, by detector (records.contract.redaction); None when nothing.
    redacted: dict[str, int] | None = None
    # What the agent ran as (a version, a prompt hash, a git sha); None when it did not say.
    release: str | None = None


def normalise(
    raw: Any,
    *,
    now: datetime,
    limits: Limits = Limits(),
    scrub: bool = False,
    redactor: Redactor | None = None,
) -> NormalisedRecord | Errors:
    """Return the record ready to store, or its errors keyed by field path.

    `scrub` asks for the slow walk over `data` that replaces NUL characters (PostgreSQL cannot
    store them) and rejects non-finite numbers in fields the schema does not declare; the caller
    sets it only when the body could contain either.

    `redactor` replaces the secrets and personal data in the free text of `data` first: what is
    validated, derived, hashed and stored is the redacted payload (records.contract.redaction).
    """
    raw, redacted = _redact(raw, redactor)
    return _judge(raw, now, limits, scrub, redacted)


def _redact(raw: Any, redactor: Redactor | None) -> tuple[Any, dict[str, int] | None]:
    """The record with its free text redacted, and the finds by detector (None: none)."""
    if redactor is None or not isinstance(raw, dict) or "data" not in raw:
        return raw, None
    if not isinstance(raw.get("kind"), str):
        return raw, None
    data, redacted = redactor.redact(raw["kind"], raw["data"])
    return ({**raw, "data": data}, redacted) if redacted else (raw, None)


def _judge(
    raw: Any, now: datetime, limits: Limits, scrub: bool, redacted: dict[str, int] | None
) -> NormalisedRecord | Errors:
    """normalise's judgement of a record already redacted (`redacted`: what was found)."""
    if not isinstance(raw, dict):
        return {"record": [f"must be a JSON object, got {_json_type(raw)}"]}
    # Convert to the kind's own envelope: msgspec rebuilds a union's type info on every call,
    # which made converting to schema.AnyRecord many times slower (bench/ingest.py measures it).
    envelope_type = (
        schema.ENVELOPES.get(raw.get("kind")) if isinstance(raw.get("kind"), str) else None
    )
    try:
        envelope = msgspec.convert(raw, envelope_type or schema.AnyRecord)
    except msgspec.ValidationError as exc:
        if envelope_type is None:  # no kind, or an unknown one: nothing else can be judged
            return translate_error(str(exc), raw.get("kind"))
        return all_errors(raw, envelope_type) or translate_error(str(exc), raw.get("kind"))

    errors: Errors = {}
    if envelope.ts < EARLIEST_TS:
        errors["ts"] = ["is before 2000-01-01; send the time the decision was made"]
    if envelope.ts > now + limits.max_future:
        minutes = int(limits.max_future.total_seconds() // 60)
        errors["ts"] = [
            f"is more than {minutes} minutes in the future (server time {now:%Y-%m-%dT%H:%M:%SZ})"
        ]
    kind = raw["kind"]
    data = raw["data"]
    if kind == rollup_keys.NOTICE:
        errors.update(_check_notice_detail(envelope.data))
    sanitized: list[str] = []
    if scrub:
        for name in ("id", "run_id", "session_id", "agent", "parent_run_id"):
            value = getattr(envelope, name)
            if value is not None and "\x00" in value:
                errors.setdefault(name, []).append("must not contain a NUL character")
        data = _scrub(data, "data", sanitized, errors)
    if errors:
        return errors

    try:
        data_json = orjson.dumps(data)
    except orjson.JSONEncodeError as exc:
        if "Recursion" in str(exc):
            return {"data": [TOO_DEEP]}
        try:  # integers beyond 64 bits in undeclared fields
            data_json = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
        except RecursionError:
            return {"data": [TOO_DEEP]}
    if len(data_json) > limits.max_data_bytes:
        return {"data": [f"is {len(data_json):,} bytes; the limit is {limits.max_data_bytes:,}"]}

    spec = KINDS[kind]
    if sanitized:
        # Derive from the scrubbed payload: a facet column (a model name) must not carry a NUL.
        envelope = msgspec.convert({**raw, "data": data}, envelope_type or schema.AnyRecord)
    derived = spec.derive(envelope.data)
    if sanitized:
        derived.fields["nul_replaced"] = sanitized
    if derived.violations:
        derived.fields["violations"] = derived.violations
    if redacted:
        derived.fields[redaction.DERIVED_FIELD] = redacted
    ts = envelope.ts.astimezone(UTC)
    record_key = envelope.id or _content_key(envelope, kind, ts, data)
    return NormalisedRecord(
        record_key=record_key,
        kind=kind,
        run_id=envelope.run_id,
        ts=ts,
        session_id=envelope.session_id,
        agent=envelope.agent,
        parent_run_id=envelope.parent_run_id,
        model=derived.model,
        iteration=derived.iteration,
        latency_ms=derived.latency_ms,
        skip_reason=derived.skip_reason,
        outcome=derived.outcome,
        is_swap=derived.is_swap,
        is_fallback=derived.is_fallback,
        is_error=derived.is_error,
        is_contract_break=derived.is_contract_break,
        rollup_key=derived.rollup_key,
        tokens_in=derived.tokens_in,
        tokens_out=derived.tokens_out,
        named_models=named_models(derived.model, derived.other_models),
        has_violation=bool(derived.violations),
        data_json=data_json.decode(),
        derived_json=orjson.dumps(derived.fields).decode(),
        usage=derived.usage,
        redacted=redacted or None,
        release=envelope.release,
    )


@dataclass(slots=True)
class Judged:
    """A batch judged record by record: the records to store, and the rest with their errors.

    Each posted record comes with a tag its transport names it by in an answer (its index in a
    native body, the span an OTLP record was mapped from); rejections keep the tag.
    """

    valid: list[NormalisedRecord] = field(default_factory=list)
    rejected: list[tuple[Any, Any, Errors]] = field(default_factory=list)  # (tag, raw, errors)


def normalise_batch(
    tagged: Iterable[tuple[Any, Any]],
    *,
    now: datetime,
    limits: Limits = Limits(),
    scrub: bool = False,
    redactor: Redactor | None = None,
) -> Judged:
    """`normalise` each (tag, raw record) of a batch; one bad record never blocks the others."""
    judged = Judged()
    if redactor is not None and redactor.active:
        # The whole batch redacted first, then judged: two loops, each over its own code, run
        # faster than the two steps taken in turn record by record.
        prepared = [(tag, *_redact(raw, redactor)) for tag, raw in tagged]
    else:
        prepared = ((tag, raw, None) for tag, raw in tagged)
    for tag, raw, redacted in prepared:
        result = _judge(raw, now, limits, scrub, redacted)
        if isinstance(result, NormalisedRecord):
            judged.valid.append(result)
        else:
            judged.rejected.append((tag, raw, result))
    return judged


def named_models(model: str | None, others: tuple[str, ...]) -> str | None:
    """The `named_models` column: "|a|b|" (names escaped as rollup keys escape them), or None
    when the record names no model besides `model` (the filter then reads `model` alone)."""
    if not others:
        return None
    names = [model, *others] if model else list(others)
    return "|" + "|".join(rollup_keys.escape(n) for n in names) + "|"


def _content_key(envelope: schema.Envelope, kind: str, ts: datetime, data: Any) -> str:
    """The idempotency key of a record posted without `id`: a hash of its canonical form.

    Canonical: the envelope with `ts` in UTC and every object's keys sorted, so that an exact
    resend (or the same record re-serialised by another client) hashes the same.
    """
    canonical = {
        "kind": kind,
        "run_id": envelope.run_id,
        "ts": ts.isoformat(),
        "session_id": envelope.session_id,
        "agent": envelope.agent,
        "parent_run_id": envelope.parent_run_id,
        "data": data,
    }
    if envelope.release is not None:
        # Only when posted, so that a record without one keeps the key it always had.
        canonical["release"] = envelope.release
    try:
        text = orjson.dumps(canonical, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:  # integers beyond 64 bits
        text = json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(text).hexdigest()


def _check_notice_detail(notice: schema.Notice) -> Errors:
    detail_type = schema.NOTICE_DETAILS.get(notice.code)
    if detail_type is None:
        return {}
    try:
        msgspec.convert(notice.detail, detail_type)
    except msgspec.ValidationError as exc:
        return translate_error(str(exc), None, prefix="data.detail", root=detail_type)
    return {}


def _scrub(value: Any, path: str, sanitized: list[str], errors: Errors, depth: int = 1) -> Any:
    """Replace NUL in strings (keys too), noting where; flag non-finite numbers as errors, and
    nesting deeper than MAX_DEPTH (where the walk stops, so its own depth stays bounded)."""
    if depth > MAX_DEPTH and isinstance(value, (list, dict)):
        errors.setdefault("data", []).append(TOO_DEEP)
        return value
    if isinstance(value, str):
        if "\x00" in value:
            sanitized.append(path)
            return value.replace("\x00", "\ufffd")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            errors.setdefault(path, []).append("must be a finite number")
        return value
    if isinstance(value, list):
        return [
            _scrub(item, f"{path}[{i}]", sanitized, errors, depth + 1)
            for i, item in enumerate(value)
        ]
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            clean_key = key.replace("\x00", "\ufffd") if "\x00" in key else key
            if clean_key is not key:
                sanitized.append(f"{path}.{clean_key}")
            out[clean_key] = _scrub(item, f"{path}.{clean_key}", sanitized, errors, depth + 1)
        return out
    return value


# --- every error of a record ---------------------------------------------------------------------
def all_errors(raw: dict, envelope_type: type) -> Errors:
    """Every error of a record that failed validation, not only the first msgspec met.

    msgspec stops at the first error; this walks the declared types field by field (array items
    and object values too), converting each part on its own, so one response names all that an
    agent developer has to fix. Only the failure path pays for it.
    """
    errors: Errors = {}
    _walk(raw, envelope_type, "", errors)
    return errors


def _walk(value: Any, tp: Any, path: str, errors: Errors) -> None:
    try:
        msgspec.convert(value, tp)
        return
    except msgspec.ValidationError as exc:
        first = str(exc)
    before = len(errors)
    inner, max_length = _unannotate(tp)
    origin, args = typing.get_origin(inner), typing.get_args(inner)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        if len(members) == 1 and value is not None:
            _walk(value, members[0], path, errors)
    elif isinstance(inner, type) and issubclass(inner, msgspec.Struct) and isinstance(value, dict):
        _walk_struct(value, inner, path, errors)
    elif origin is list and isinstance(value, list) and len(value) <= (max_length or len(value)):
        for i, item in enumerate(value):
            _walk(item, args[0], f"{path}[{i}]", errors)
    elif origin is dict and isinstance(value, dict) and len(value) <= (max_length or len(value)):
        for key, item in value.items():
            _walk(key, args[0], _join(path, str(key)), errors)
            _walk(item, args[1], _join(path, str(key)), errors)
    if len(errors) == before:  # nothing below was at fault: the error is this value's own
        for name, messages in translate_error(first, None, prefix=path, root=tp).items():
            errors.setdefault(name, []).extend(messages)


def _walk_struct(value: dict, struct: type, path: str, errors: Errors) -> None:
    config = struct.__struct_config__
    known = {config.tag_field} if config.tag_field else set()
    for info in msgspec.structs.fields(struct):
        known.add(info.encode_name)
        at = _join(path, info.encode_name)
        if info.encode_name in value:
            _walk(value[info.encode_name], info.type, at, errors)
        elif info.required:
            errors.setdefault(at, []).append("is required")
    if config.forbid_unknown_fields:
        where = "the record envelope (payload fields go inside data)" if not path else "this object"
        for name in value:
            if name not in known:
                errors.setdefault(_join(path, name), []).append(f"is not a field of {where}")


def _unannotate(tp: Any) -> tuple[Any, int | None]:
    """The type inside Annotated[...], and the max_length its Meta sets (if any)."""
    if typing.get_origin(tp) is typing.Annotated:
        inner, *metas = typing.get_args(tp)
        limits = [m.max_length for m in metas if getattr(m, "max_length", None) is not None]
        return inner, (limits[0] if limits else None)
    return tp, None


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


# --- error messages ----------------------------------------------------------------------------
_AT = re.compile(r"^(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_TYPE_WORDS = {
    "float": "a number",
    "int": "an integer",
    "str": "a string",
    "bool": "true or false",
    "array": "an array",
    "object": "an object",
    "null": "null",
    "datetime": "a timestamp",
}
_TIMESTAMP = "must be an RFC 3339 timestamp with an offset, e.g. 2026-11-20T09:00:00Z"


def translate_error(message: str, kind: Any, *, prefix: str = "", root: Any = None) -> Errors:
    """Turn one msgspec validation message into {field path: [plain message]}."""
    match = _AT.match(message)
    text, path = match.group("msg"), (match.group("path") or "").lstrip(".")
    if prefix:
        path = f"{prefix}.{path}" if path and not path.startswith("[") else f"{prefix}{path}"

    def at(name: str) -> str:
        return f"{path}.{name}" if path else name

    if "::" in text:  # a cross-field rule from a Struct's __post_init__
        name, _, rule = text.partition("::")
        return {at(name): [rule]}
    if m := re.match(r"Object missing required field `(.+)`", text):
        return {at(m.group(1)): ["is required"]}
    if m := re.match(r"Object contains unknown field `(.+)`", text):
        where = "the record envelope (payload fields go inside data)" if not path else "this object"
        return {at(m.group(1)): [f"is not a field of {where}"]}
    if text.startswith("Invalid value") and path == "kind":
        return {"kind": [f"must be one of: {', '.join(KIND_NAMES)}"]}
    if text.startswith("Invalid enum value"):
        allowed = _allowed_values(root, kind, path, prefix)
        return {path: [f"must be one of: {', '.join(map(str, allowed))}" if allowed else text]}
    if "RFC3339" in text or "with a timezone component" in text:
        return {path: [_TIMESTAMP]}
    if m := re.match(r"Expected `float` ([<>]=) (-?[\d.e+]+)$", text):
        bound = float(m.group(2))
        if abs(bound) > 1e300:
            return {path: ["must be a finite number"]}
        return {path: [f"must be a finite number {m.group(1)} {bound:g}"]}
    if m := re.match(r"Expected `int` ([<>]=) (-?\d+)$", text):
        return {path: [f"must be an integer {m.group(1)} {m.group(2)}"]}
    if m := re.match(r"Expected `str` of length ([<>]=) (\d+)$", text):
        if m.group(1) == ">=" and m.group(2) == "1":
            return {path: ["must not be empty"]}
        word = "at most" if m.group(1) == "<=" else "at least"
        return {path: [f"must be {word} {m.group(2)} characters"]}
    if m := re.match(r"Expected `(array|object)` of length <= (\d+)$", text):
        return {
            path: [
                f"must have at most {m.group(2)} {'items' if m.group(1) == 'array' else 'entries'}"
            ]
        }
    if text == f"Expected `str` matching regex {schema.RELEASE_PATTERN!r}":
        return {path: ["must not contain control characters (newlines, tabs, NUL, ...)"]}
    if text.startswith("Expected `str` matching regex"):
        return {path: ["must be a dotted code, e.g. classifier.fallback"]}
    if m := re.match(r"Expected `([^`]+)`, got `([^`]+)`$", text):
        wanted = " or ".join(_TYPE_WORDS.get(t.strip(), t.strip()) for t in m.group(1).split("|"))
        got = _TYPE_WORDS.get(m.group(2), m.group(2))
        return {path or "record": [f"must be {wanted}, got {got}"]}
    return {path or "record": [text]}


def _allowed_values(root: Any, kind: Any, path: str, prefix: str) -> tuple:
    """The Literal values allowed at `path`, found by walking the declared types."""
    if root is None:
        root = schema.ENVELOPES.get(kind)
    if prefix:
        path = path[len(prefix) :].lstrip(".")
    node = msgspec.inspect.type_info(root) if root is not None else None
    for part in re.findall(r"[^.\[\]]+|\[[^\]]*\]", path):
        node = _unwrap(node)
        if isinstance(node, msgspec.inspect.StructType) and not part.startswith("["):
            node = next((f.type for f in node.fields if f.encode_name == part), None)
        elif isinstance(node, (msgspec.inspect.ListType, msgspec.inspect.DictType)):
            node = node.item_type if isinstance(node, msgspec.inspect.ListType) else node.value_type
        else:
            return ()
    node = _unwrap(node)
    return node.values if isinstance(node, msgspec.inspect.LiteralType) else ()


def _unwrap(node: Any) -> Any:
    if isinstance(node, msgspec.inspect.UnionType):
        members = [t for t in node.types if not isinstance(t, msgspec.inspect.NoneType)]
        return members[0] if len(members) == 1 else node
    return node


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return "a number"
    return "null" if value is None else type(value).__name__

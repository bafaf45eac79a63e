"""Redaction of a record's free text before it is stored (docs/operations.md, "Redaction").

`Redactor.redact(kind, data)` returns the payload with every secret and piece of personal data
the project's rules find replaced by a marker (`[REDACTED:card]`), and the count of each
detector's finds. records.contract.normalise calls it before it validates and derives, so the
stored `data`, the derived fields, the facet columns and the content key are all computed from
the redacted payload: nothing of a redacted value is written anywhere.

What is free text is read off the kinds' declarations (records.contract.schema): a string field
without a name's bound (`Text`, a turn's `text`), a field of any JSON (`Any`, `JsonObject`: tool
arguments, a notice's `detail`, a request patch's `additional_params`) and every field the kind
does not declare (kept as posted). Names, ids, dotted codes, closed values and numbers are not:
they are what records are grouped and filtered by. Keys of JSON objects are not scanned; a key
named by a project's JSON key rule has its whole value replaced.

A project's own patterns are compiled with RE2 (`compile_pattern`), which matches in linear time
whatever the pattern: no pattern can make ingest backtrack. What RE2 cannot run (backreferences,
lookaround) is refused with the reason.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgspec

from records.contract.detectors import Scanner, marker
from records.contract.schema import DATA_TYPES
from records.redaction_syntax import BUILT_IN, compile_pattern

# The derived field that holds a record's counts by detector (never the values).
DERIVED_FIELD = "redacted"
# What a JSON key rule's finds are counted as.
KEY_DETECTOR = "key"
# A name and an id are bounded to this; a longer bound is free text.
_NAME_BOUND = 200
_TEXT = "text"
# What a redactor remembers of the texts it found clean (Redactor.text): texts up to this long,
# this many of them, forgotten all at once when full so that the texts of the moment come back.
MAX_CLEAN_TEXT_CHARS = 120
MAX_CLEAN_TEXTS = 2048
_JSON = "json"


# --- which fields are free text --------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StructPlan:
    """A declared object: its field names, and the fields that hold something to scan (free
    text, or an object that may carry undeclared fields)."""

    declared: frozenset[str]
    active: tuple[tuple[str, Any], ...]
    # Only names and numbers inside (no active field): its undeclared fields are all there is
    # to scan.
    leaf: bool


def _plan(info: Any) -> Any:
    """What to scan in a value of this declared type: None (nothing), _TEXT, _JSON, a
    StructPlan, ("list", plan) or ("dict", plan)."""
    if isinstance(info, msgspec.inspect.StrType):
        if info.pattern is None and (info.max_length is None or info.max_length > _NAME_BOUND):
            return _TEXT
        return None
    if isinstance(info, msgspec.inspect.AnyType):
        return _JSON
    if isinstance(info, msgspec.inspect.UnionType):
        plans = [_plan(t) for t in info.types if not isinstance(t, msgspec.inspect.NoneType)]
        plans = [p for p in plans if p is not None]
        if not plans:
            return None
        return plans[0] if len(plans) == 1 else _JSON
    if isinstance(info, msgspec.inspect.StructType):
        fields = [(f.encode_name, _plan(f.type)) for f in info.fields]
        active = tuple((name, plan) for name, plan in fields if plan is not None)
        return StructPlan(frozenset(name for name, _ in fields), active, leaf=not active)
    if isinstance(info, msgspec.inspect.ListType):
        item = _plan(info.item_type)
        return None if item is None else ("list", item)
    if isinstance(info, msgspec.inspect.DictType):
        value = _plan(info.value_type)
        if value == _JSON:
            return _JSON
        return None if value is None else ("dict", value)
    return None


PLANS: dict[str, Any] = {
    kind: _plan(msgspec.inspect.type_info(data_type)) for kind, data_type in DATA_TYPES.items()
}


def _all_declared(items: Any, plan: StructPlan) -> bool:
    """Whether every item is an object of leaf `plan` with declared fields only (the keys of
    all of them gathered in one call: a pick ranks dozens of tools)."""
    try:
        return set().union(*items) <= plan.declared
    except TypeError:  # an item that is not an object: the record is rejected anyway
        return False


# --- the redactor ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Rules:
    """A project's rules as plain data: the built-in detectors on, its own patterns (name,
    pattern) and its JSON keys."""

    detectors: tuple[str, ...] = ()
    patterns: tuple[tuple[str, str], ...] = ()
    keys: tuple[str, ...] = ()


class Redactor:
    def __init__(self, rules: Rules) -> None:
        unknown = set(rules.detectors) - set(BUILT_IN)
        if unknown:
            raise ValueError(f"unknown detectors: {sorted(unknown)}")
        self.scanner = Scanner(rules.detectors)
        self.custom = tuple((name, compile_pattern(p)) for name, p in rules.patterns)
        self.keys = frozenset(k.casefold() for k in rules.keys)
        self.active = bool(rules.detectors or rules.patterns or rules.keys)
        # Short texts these rules found nothing in: the same few (a model, a finish reason, an
        # operation name) come in most records, and a lookup costs less than the detectors.
        self._clean: set[str] = set()

    def redact(self, kind: str, data: Any) -> tuple[Any, dict[str, int]]:
        """`data` with what the rules find replaced by markers (the same object when nothing
        was), and the finds by detector. Tolerates any value: judging it is normalise's part."""
        counts: dict[str, int] = {}
        plan = PLANS.get(kind)
        if not self.active or plan is None:
            return data, counts
        return self._walk(data, plan, counts), counts

    def text(self, value: str, counts: dict[str, int]) -> str:
        """`value` with what the rules find replaced, each find counted into `counts`."""
        if value in self._clean:
            return value
        finds: dict[str, int] = {}
        redacted = self._scan(value, finds)
        if not finds:
            if len(value) <= MAX_CLEAN_TEXT_CHARS:
                if len(self._clean) >= MAX_CLEAN_TEXTS:
                    self._clean.clear()
                self._clean.add(value)
            return value
        merge_counts(counts, finds.items())
        return redacted

    def _scan(self, value: str, counts: dict[str, int]) -> str:
        if len(value) >= 6:  # shorter than any built-in detector's match
            value = self.scanner.redact(value, counts)
        for name, pattern in self.custom:
            try:
                found = pattern.subn(marker(name), value)
            except UnicodeEncodeError:
                # A lone surrogate, which RE2 cannot read: the body reader rejects the record
                # holding one (api.bodies.surrogate_path), so it is never stored.
                continue
            if found[1]:
                value = found[0]
                counts[name] = counts.get(name, 0) + found[1]
        return value

    def _walk(self, value: Any, plan: Any, counts: dict[str, int]) -> Any:
        # The plans' markers are compared by identity: `==` on a StructPlan runs the dataclass's
        # generated __eq__, and this runs for every field of every record.
        if plan is _TEXT:
            return self.text(value, counts) if isinstance(value, str) else value
        if plan is _JSON:
            return self._json(value, counts)
        if type(plan) is StructPlan:
            return self._struct(value, plan, counts)
        shape, inner = plan
        if shape == "list":
            if not isinstance(value, list):
                return value
            if type(inner) is StructPlan and inner.leaf and _all_declared(value, inner):
                return value
            items = [self._walk(item, inner, counts) for item in value]
            return value if all(a is b for a, b in zip(items, value, strict=True)) else items
        if not isinstance(value, dict):  # "dict"
            return value
        if type(inner) is StructPlan and inner.leaf and _all_declared(value.values(), inner):
            return value
        new_values = {k: self._walk(v, inner, counts) for k, v in value.items()}
        return value if all(new_values[k] is v for k, v in value.items()) else new_values

    def _struct(self, value: Any, plan: StructPlan, counts: dict[str, int]) -> Any:
        if not isinstance(value, dict):
            return value
        out = None
        # Fields the kind does not declare are kept as posted: any JSON, scanned as such.
        if not plan.declared.issuperset(value):
            for key in value.keys() - plan.declared:
                item = value[key]
                new = self._json_entry(key, item, counts, 0)
                if new is not item:
                    out = out if out is not None else dict(value)
                    out[key] = new
        for name, sub in plan.active:
            item = value.get(name)
            if item is None:
                continue
            # The two commonest fields, a text and an object of names and numbers (a usage, a
            # classifier), without a call to _walk.
            if sub is _TEXT:
                if not isinstance(item, str):
                    continue
                new = self.text(item, counts)
            elif (
                type(sub) is StructPlan
                and sub.leaf
                and isinstance(item, dict)
                and sub.declared.issuperset(item)
            ):
                continue
            else:
                new = self._walk(item, sub, counts)
            if new is not item:
                out = out if out is not None else dict(value)
                out[name] = new
        return value if out is None else out

    def _json_entry(self, key: Any, item: Any, counts: dict[str, int], depth: int) -> Any:
        """An object's entry: its whole value replaced when a JSON key rule names the key."""
        if self.keys and isinstance(key, str) and key.casefold() in self.keys:
            counts[KEY_DETECTOR] = counts.get(KEY_DETECTOR, 0) + 1
            return marker(KEY_DETECTOR)
        return self._json(item, counts, depth)

    def _json(self, value: Any, counts: dict[str, int], depth: int = 0) -> Any:
        if isinstance(value, str):
            return self.text(value, counts)
        if depth > 256:  # deeper than normalise accepts: the record is rejected anyway
            return value
        # Strings, numbers and the like are handled in the loops rather than by a call each:
        # an undeclared object (an OTLP span's reference) is mostly short strings and numbers.
        if isinstance(value, dict):
            out = None
            keys = self.keys
            for key, item in value.items():
                if keys:
                    new = self._json_entry(key, item, counts, depth + 1)
                elif isinstance(item, str):
                    new = self.text(item, counts)
                elif isinstance(item, (dict, list)):
                    new = self._json(item, counts, depth + 1)
                else:
                    continue
                if new is not item:
                    if out is None:
                        out = dict(value)
                    out[key] = new
            return value if out is None else out
        if isinstance(value, list):
            items = [
                self.text(item, counts)
                if isinstance(item, str)
                else self._json(item, counts, depth + 1)
                if isinstance(item, (dict, list))
                else item
                for item in value
            ]
            return value if all(a is b for a, b in zip(items, value, strict=True)) else items
        return value


@functools.lru_cache(maxsize=256)
def redactor_for(rules: Rules) -> Redactor:
    """One compiled redactor per distinct set of rules, kept across batches."""
    return Redactor(rules)


def merge_counts(into: dict[str, int], counts: Iterable[tuple[str, int]]) -> None:
    for name, n in counts:
        into[name] = into.get(name, 0) + n

"""Reading flattened attributes: the indexed lists OpenInference and OpenLLMetry spell as
`prefix.N.field` keys, and JSON carried in a string attribute. Pure functions."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import orjson

# An index beyond this is not a list position but a hostile key: ignored.
MAX_INDEX = 100_000
# What is remembered of spans' key sets (the keys of a span's attributes, as a tuple in order:
# the spans of one SDK repeat the same keys in the same order), at most: this many sets, of at
# most this many keys each. A hostile export may vary them every span, or send thousands.
MAX_KEY_SETS = 256
MAX_KEY_SET_KEYS = 64

T = TypeVar("T")


class KeySetCache(Generic[T]):
    """What `read` makes of a span's attributes when it depends on their keys alone, remembered
    per key set (the keys in order): the spans of one SDK repeat the same keys. Bounded by
    MAX_KEY_SETS and MAX_KEY_SET_KEYS; beyond, worked out each time."""

    __slots__ = ("_read", "_known")

    def __init__(self, read: Callable[[dict[str, Any]], T]):
        self._read = read
        self._known: dict[tuple[str, ...], T] = {}

    def __call__(self, attributes: dict[str, Any]) -> T:
        shape = tuple(attributes)
        try:
            return self._known[shape]
        except KeyError:
            found = self._read(attributes)
            if len(self._known) < MAX_KEY_SETS and len(shape) <= MAX_KEY_SET_KEYS:
                self._known[shape] = found
            return found


def indexed(attributes: dict[str, Any], prefix: str) -> list[tuple[int, dict[str, Any]]]:
    """`prefix.0.a`, `prefix.0.b`, `prefix.1.a` → [(0, {"a", "b"}), (1, {"a"})], by index."""
    return IndexedKeys((prefix,)).lists(attributes)[0]


class IndexedKeys:
    """indexed() for several prefixes (none the start of another) in one pass, remembering where
    each key falls: the spans of one export repeat the same keys (an agent offers the same tools
    on every call), so each key is taken apart once rather than once per span."""

    __slots__ = ("prefixes", "_places", "_none_of_theirs")

    # Keys remembered at most: beyond, a key is taken apart each time (a hostile export may
    # send every key once).
    MAX_KEYS = 4096

    def __init__(self, prefixes: tuple[str, ...]):
        self.prefixes = prefixes
        # key → (which prefix, index, the rest of the key), or None when it is none of theirs.
        self._places: dict[str, tuple[int, int, str] | None] = {}
        # The key sets found to hold none of the prefixes' keys (MAX_KEY_SETS).
        self._none_of_theirs: set[tuple[str, ...]] = set()

    def lists(self, attributes: dict[str, Any]) -> list[list[tuple[int, dict[str, Any]]]]:
        """For each prefix, what indexed(attributes, prefix) answers."""
        shape = tuple(attributes)
        if shape in self._none_of_theirs:
            return [[] for _ in self.prefixes]
        found: list[dict[int, dict[str, Any]]] = [{} for _ in self.prefixes]
        places = self._places
        for key, value in attributes.items():
            try:
                place = places[key]
            except KeyError:
                place = self._place(key)
                if len(places) < self.MAX_KEYS:
                    places[key] = place
            if place is None:
                continue
            which, index, rest = place
            group = found[which].get(index)
            if group is None:
                group = found[which][index] = {}
            group[rest] = value
        if (
            not any(found)
            and len(self._none_of_theirs) < MAX_KEY_SETS
            and len(shape) <= MAX_KEY_SET_KEYS
        ):
            self._none_of_theirs.add(shape)
        return [sorted(lists.items()) if lists else [] for lists in found]

    def _place(self, key: str) -> tuple[int, int, str] | None:
        if not key.startswith(self.prefixes):
            return None
        for which, prefix in enumerate(self.prefixes):
            if key.startswith(prefix):
                number, dot, rest = key[len(prefix) :].partition(".")
                if not dot or not rest or not number.isascii() or not number.isdigit():
                    return None
                if len(number) > 6 or int(number) > MAX_INDEX:
                    return None
                return which, int(number), rest
        return None


def json_value(value: Any) -> Any:
    """A JSON string parsed; any other value as it is; None when the string is not JSON."""
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return None
    return value


def text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def count(value: Any) -> int | None:
    """A token count: integers, and whole doubles (some SDKs send numbers as doubles)."""
    if type(value) is int:  # the common case first; a bool is an int, but not of this type
        return value
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return value if isinstance(value, int) else None


def tool_name(definition: Any) -> str | None:
    """The name of one tool definition: {"name"}, OpenAI's {"function": {"name"}}, or a JSON
    string of either."""
    definition = json_value(definition) if isinstance(definition, str) else definition
    if not isinstance(definition, dict):
        return None
    function = definition.get("function")
    if isinstance(function, dict) and text(function.get("name")):
        return function["name"]
    return text(definition.get("name"))


# A tool definition's name by its JSON text. An agent offers the same tools on every call, so
# each definition is parsed once rather than once a span. Bounded in count and in the length of
# a definition kept, like IndexedKeys: a hostile export may send every definition once.
NAMES_BY_TEXT: dict[str, str | None] = {}
MAX_NAMED_DEFINITIONS = 1024
MAX_NAMED_DEFINITION_CHARS = 8192


# Whole lists of definitions whose every definition is named, by their texts: the same list
# comes with every call. Bounded likewise, in lists and in the characters of a list kept.
NAMES_BY_LIST: dict[tuple[str, ...], list[str]] = {}
MAX_NAMED_LISTS = 256
MAX_NAMED_LIST_CHARS = 65_536


def tool_names(definitions: list, label: str, problems: list[str]) -> list[str]:
    """The names of a list of tool definitions (tool_name), each one without a name a problem
    said as `label[i] names no tool`."""
    key = tuple(definitions)
    try:
        return list(NAMES_BY_LIST[key])
    except KeyError:
        pass
    except TypeError:  # a definition that is an object (an OTLP kvlist), not JSON text
        key = None
    names = _names(definitions, label, problems)
    if (
        key is not None
        and len(names) == len(key)
        and len(NAMES_BY_LIST) < MAX_NAMED_LISTS
        and sum(map(len, key)) <= MAX_NAMED_LIST_CHARS
    ):
        NAMES_BY_LIST[key] = list(names)
    return names


def _names(definitions: list, label: str, problems: list[str]) -> list[str]:
    names = []
    known = NAMES_BY_TEXT
    for i, definition in enumerate(definitions):
        if isinstance(definition, str):
            try:
                name = known[definition]
            except KeyError:
                name = tool_name(definition)
                if (
                    len(known) < MAX_NAMED_DEFINITIONS
                    and len(definition) <= MAX_NAMED_DEFINITION_CHARS
                ):
                    known[definition] = name
        else:
            name = tool_name(definition)
        if name is None:
            problems.append(f"{label}[{i}] names no tool")
            continue
        names.append(name)
    return names


# "Error code: 503 - ...", as the openai and anthropic clients word their exceptions.
_STATUS_IN_MESSAGE = re.compile(r"\b(?:Error code|status(?: code)?)[: =]+([1-5]\d\d)\b", re.I)


def status_in_message(message: str | None) -> int | None:
    """The HTTP status an error message names, when the span has no status attribute."""
    match = _STATUS_IN_MESSAGE.search(message) if message else None
    return int(match.group(1)) if match else None

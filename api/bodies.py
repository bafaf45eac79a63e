"""The one way the API decodes a JSON request body (no body makes a 5xx).

Ingest (api.ingest) and every other POST/PATCH of the API (through `JSONParser`, DRF's default
parser here) decode with `decode_json`: UTF-8 only, nesting bounded by the interpreter's own
recursion limit (kept NESTING levels above the request), and every failure a ParseError (400)
that says what is wrong, so that no UnicodeDecodeError or RecursionError escapes as a 500.

Ingest alone may take the standard library's slower path for the number forms msgspec refuses
(NaN, Infinity, 1e400), so that only the record holding one is rejected. That path lets lone
surrogates (`"\\udc00"`) through, which no database or encoder downstream can store:
`surrogate_path` finds them so that the record holding one is rejected by name instead.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from typing import Any

import msgspec
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import BaseParser

_decoder = msgspec.json.Decoder()
# An escape of a UTF-16 surrogate, \ud800 to \udfff: the only way JSON text can spell one.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
TOO_DEEP = "The body is nested too deeply (arrays and objects inside each other)."
# The decoders count a body's nesting against the interpreter's recursion limit, together with
# the frames of the request under way. So that the nesting a body may have does not shrink as
# middleware is added, the limit is kept NESTING levels above the caller's own depth.
NESTING = 1_000


def _leave_room_for_nesting() -> None:
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    if sys.getrecursionlimit() < depth + NESTING:
        sys.setrecursionlimit(depth + NESTING)


def not_utf8(exc: UnicodeDecodeError) -> str:
    return (
        f"The body is not UTF-8 (byte 0x{exc.object[exc.start]:02x} at position {exc.start}); "
        "send JSON encoded as UTF-8."
    )


def decode_json(body: bytes, *, lenient_numbers: bool = False) -> tuple[Any, bool]:
    """The JSON value of `body`, and whether it may hold what the fast path never returns.

    The flag is true when the body may hold NUL characters, non-finite numbers or lone
    surrogates (records.contract.normalise's scrub and `surrogate_path` then look). With
    `lenient_numbers`, a body msgspec refuses only for NaN, Infinity or a number beyond the
    float range is decoded by the standard library instead of refused.
    """
    if not body.strip():
        raise ParseError("The body is empty.")
    _leave_room_for_nesting()
    try:
        return _decoder.decode(body), b"\\u0000" in body
    except msgspec.ValidationError:  # "Number out of range" (a subclass of DecodeError)
        if not lenient_numbers:
            raise ParseError("The body holds a number beyond the range of a float.") from None
    except msgspec.DecodeError as exc:
        if not lenient_numbers or not any(t in body for t in (b"NaN", b"Infinity")):
            raise ParseError(f"The body is not valid JSON: {exc}.") from None
    except UnicodeDecodeError as exc:
        raise ParseError(not_utf8(exc)) from None
    except RecursionError:
        raise ParseError(TOO_DEEP) from None
    try:
        # Decode first: json.loads would guess UTF-16 or UTF-32 for bytes that are not UTF-8.
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ParseError(not_utf8(exc)) from None
    try:
        return json.loads(text), True
    except RecursionError:
        raise ParseError(TOO_DEEP) from None
    except ValueError as exc:
        raise ParseError(f"The body is not valid JSON: {exc}.") from None


def may_hold_surrogates(body: bytes) -> bool:
    return _SURROGATE_ESCAPE.search(body) is not None


def _has_surrogate(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _printable(key: str) -> str:
    return key.encode("utf-8", "backslashreplace").decode("utf-8")


def surrogate_path(value: Any, path: str = "") -> str | None:
    """The path of the first string or key in `value` holding a lone surrogate, or None.

    Iterative, so that depth costs no stack; a bad key is named with its surrogate escaped,
    since the path goes back to the client in a JSON answer that must itself be valid UTF-8.
    """
    stack = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if _has_surrogate(item):
                return where or "record"
        elif isinstance(item, dict):
            for key, child in item.items():
                name = f"{where}.{_printable(key)}" if where else _printable(key)
                if _has_surrogate(key):
                    return name
                stack.append((child, name))
        elif isinstance(item, list):
            stack.extend((child, f"{where}[{i}]") for i, child in enumerate(item))
    return None


SURROGATE_MESSAGE = "is not valid Unicode: it holds a lone surrogate (an unpaired \\ud800-\\udfff)"


class JSONParser(BaseParser):
    """DRF's JSON parser on `decode_json`: the API's POST/PATCH bodies (alert rules and
    channels, export jobs) decode the way ingest does, strictly (no NaN, no 1e400)."""

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None) -> Any:
        body = stream.read() if stream is not None else b""
        return decode_json(body)[0]


class RejectUnknownFields:
    """A serializer mixin: a body field the serializer does not have is a 400 naming it.

    DRF drops unknown fields silently, so a typo (`treshold`) would save a rule without the
    change the caller meant. Read-only fields are known: a body read back and sent again (a PUT
    of what GET returned) is accepted.
    """

    def to_internal_value(self, data):
        if isinstance(data, Mapping):
            unknown = [name for name in data if name not in self.fields]
            if unknown:
                known = ", ".join(n for n, f in self.fields.items() if not f.read_only)
                raise ValidationError(
                    {name: [f"is not a field here; the fields are {known}"] for name in unknown}
                )
        return super().to_internal_value(data)

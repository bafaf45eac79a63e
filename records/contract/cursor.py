"""Keyset cursors: the sort key of a list's last row, carried in a link to the next page.

A cursor is unpadded base64url of a JSON array of the key's values, times as RFC 3339. It is
opaque to clients but not secret: whoever holds one can forge another, which only moves the
page within the queryset it is applied to (already limited to the caller's project). What
decoding guarantees is that the values are of the kinds the list's key has and that a query can
use them: a time inside the calendar (`filters.parse_time`, the one reader of outside times),
an integer a bigint column holds, text a database can store. Anything else is CursorError.

The API's lists (api.pagination) and the pages' lists (the runs, sessions and fallbacks pages)
use this one codec; each says what a refused cursor means in its own terms (a 400 naming
`cursor`, a "damaged page link" notice).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from datetime import datetime

import orjson

from records.contract.filters import FilterError, check_text, parse_time

# The kinds a key's value may be: a time, a whole number (an id, a count) or text.
Value = datetime | int | str
MAX_INT = 2**63  # bigint: integers in a cursor are 0 <= n < MAX_INT


class CursorError(ValueError):
    """Not a cursor of this list: damaged, truncated, forged out of shape, or from another list."""


def encode_cursor(values: Sequence[Value]) -> str:
    """The cursor of a key. Times must carry their zone (the database's always do)."""
    return (
        base64.urlsafe_b64encode(
            orjson.dumps([v.isoformat() if isinstance(v, datetime) else v for v in values])
        )
        .decode()
        .rstrip("=")
    )


def decode_cursor(cursor: str, kinds: Sequence[type]) -> list[Value]:
    """The key's values, one of each of `kinds` (datetime, int or str) in order; times in UTC."""
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
        values = orjson.loads(raw)
    except (binascii.Error, ValueError):  # orjson.JSONDecodeError is a ValueError
        raise CursorError("not base64url of JSON") from None
    if not isinstance(values, list) or len(values) != len(kinds):
        raise CursorError(f"not a list of {len(kinds)} values")
    return [_value(value, kind) for value, kind in zip(values, kinds, strict=True)]


def _value(value: object, kind: type) -> Value:
    if kind is datetime:
        try:
            return parse_time("cursor", value)
        except FilterError as exc:
            raise CursorError(exc.message) from None
    if kind is int:
        # bool is an int to Python, never to a list's key.
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_INT:
            return value
        raise CursorError(f"{value!r} is not a whole number from 0 to 2**63 - 1")
    if kind is str and isinstance(value, str):
        try:
            return check_text("cursor", value)
        except FilterError as exc:
            raise CursorError(exc.message) from None
    raise CursorError(f"{value!r} is not a {kind.__name__}")

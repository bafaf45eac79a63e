"""The keyset cursor codec (records.contract.cursor) that the API's lists and the pages'
lists share: what it writes it reads back, and anything else is CursorError."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta, timezone

import orjson
import pytest

from records.contract.cursor import MAX_INT, CursorError, decode_cursor, encode_cursor

WHEN = datetime(2026, 11, 20, 9, 30, 15, 123456, tzinfo=UTC)


def forged(values) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(values)).decode().rstrip("=")


@pytest.mark.parametrize(
    ("values", "kinds"),
    [
        ([WHEN, 7], (datetime, int)),
        ([0, MAX_INT - 1], (int, int)),
        (["run-1", 42], (str, int)),
        (['café 🙂, "quoted" = +1', WHEN], (str, datetime)),
        ([""], (str,)),
        ([datetime(1, 1, 2, tzinfo=UTC), datetime(9999, 12, 30, tzinfo=UTC)], (datetime, datetime)),
    ],
)
def test_it_reads_back_what_it_writes(values, kinds):
    cursor = encode_cursor(values)
    assert decode_cursor(cursor, kinds) == values
    # Opaque in a URL: nothing a query string must escape.
    assert set(cursor) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_it_reads_back_a_time_of_another_zone_as_the_same_instant_in_utc():
    local = WHEN.astimezone(timezone(timedelta(hours=-5, minutes=-30)))
    (decoded,) = decode_cursor(encode_cursor([local]), (datetime,))
    assert decoded == WHEN and decoded.tzinfo == UTC


def test_it_reads_a_padded_cursor_too():
    cursor = encode_cursor([WHEN, 1])
    assert decode_cursor(cursor + "=" * (-len(cursor) % 4), (datetime, int)) == [WHEN, 1]


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "not-a-cursor",
        "%%%",
        "WzFd!",  # [1] with a character base64url does not have
        "W zFd",
        "WzFdé",
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),  # not UTF-8
        base64.urlsafe_b64encode(b"[1,").decode(),  # not JSON
    ],
)
def test_it_refuses_what_is_not_base64url_of_json(cursor):
    with pytest.raises(CursorError):
        decode_cursor(cursor, (int,))


def test_it_refuses_every_truncation_of_a_cursor():
    cursor = encode_cursor([WHEN, 123456789])
    for end in range(len(cursor)):
        with pytest.raises(CursorError):
            decode_cursor(cursor[:end], (datetime, int))


def test_it_refuses_a_cursor_whose_text_was_tampered_with():
    cursor = encode_cursor([WHEN, 5])
    raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    for tampered in (raw.replace(b"2026", b"20x6"), raw.replace(b",5]", b',"5"]'), raw[1:]):
        with pytest.raises(CursorError):
            decode_cursor(base64.urlsafe_b64encode(tampered).decode(), (datetime, int))


@pytest.mark.parametrize(
    "values",
    [
        {"ts": "2026-11-20T09:00:00Z", "id": 1},  # an object, not a list
        "2026-11-20T09:00:00Z",
        7,
        None,
        [],
        ["2026-11-20T09:00:00Z"],  # too short
        ["2026-11-20T09:00:00Z", 1, 2],  # too long
        [1, 1],  # a number where the time goes
        ["2026-11-20T09:00:00Z", "1"],  # text where the id goes
        ["2026-11-20T09:00:00Z", True],
        ["2026-11-20T09:00:00Z", 1.0],
        ["2026-11-20T09:00:00Z", -1],
        ["2026-11-20T09:00:00Z", MAX_INT],
        ["2026-11-20T09:00:00Z", [1]],
        ["2026-11-20", 1],  # no time of day
        ["2026-11-20T09:00:00", 1],  # no offset
        ["yesterday", 1],
    ],
)
def test_it_refuses_a_cursor_of_the_wrong_shape(values):
    with pytest.raises(CursorError):
        decode_cursor(forged(values), (datetime, int))


@pytest.mark.parametrize("value", ["\x00", "a\udc00b"])
def test_it_refuses_text_a_database_cannot_store(value):
    cursor = base64.urlsafe_b64encode(
        b'["' + value.encode("utf-8", "surrogatepass").replace(b"\x00", b"\\u0000") + b'"]'
    ).decode()
    with pytest.raises(CursorError):
        decode_cursor(cursor, (str,))


@pytest.mark.parametrize(
    "value",
    [
        "0001-01-01T00:00:00Z",  # the calendar's first day: a day before would overflow
        "9999-12-31T23:59:59Z",
        "9999-12-30T23:59:59-23:59",  # inside the calendar locally, past it in UTC
        "0001-01-02T00:00:00+23:59",
    ],
)
def test_it_refuses_a_time_out_of_range(value):
    with pytest.raises(CursorError, match="out of range"):
        decode_cursor(forged([value, 1]), (datetime, int))

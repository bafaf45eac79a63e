"""Property-based tests (hypothesis) of every reader of outside input (no input makes
a 5xx): the ingest body decoder with normalise behind it, the filter vocabulary, times,
limits, cursors (the API's and the runs page's) and the alert history's filters.

Each property: whatever the bytes or text, the reader returns a value or raises its own error
with a message, never anything else; and what it returns goes through to the database (a query
that runs, a record whose JSON encodes) without an error either. Bounded: ~200 examples each,
no deadline (the machine is shared).
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.exceptions import APIException

from alerts.models import AlertEvent, filter_events
from api.ingest import parse_body
from api.pagination import Keyset, parse_limit
from dashboard.queries.run_list import SORTS, Sort, keyset_page
from records.contract.cursor import CursorError
from records.contract.filters import PARAMS, FilterError, filter_records, filter_runs, parse_filters
from records.contract.normalise import NormalisedRecord, normalise
from records.formats.record_export import parse_format
from records.models import Record, Run
from tests.support.factories import KINDS, record

BOUNDED = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)

# --- strategies --------------------------------------------------------------------------------
# Text an attacker would try: NUL, lone surrogates, non-BMP, RTL marks, long runs.
hostile_text = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["\x00", "a\x00b", "\udc00", "\ud800x", "\u202e", "🙂", "", " ", "NaN"]),
    st.text(alphabet=st.sampled_from("\x00\udc00\ufffd,a "), max_size=10),
    st.just("x" * 300),
)


@st.composite
def rfc3339(draw) -> str:
    """Times in RFC 3339 form anywhere in the calendar, with any offset up to ±23:59."""
    moment = draw(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31)))
    sign = draw(st.sampled_from("+-"))
    hours, minutes = draw(st.integers(0, 23)), draw(st.integers(0, 59))
    offset = draw(st.sampled_from(["Z", f"{sign}{hours:02d}:{minutes:02d}"]))
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + offset


param_value = st.one_of(hostile_text, rfc3339(), st.sampled_from(["swap", "model_call", "a,b"]))
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    hostile_text,
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(hostile_text, children, max_size=4),
    ),
    max_leaves=20,
)


@st.composite
def bent_record(draw) -> dict:
    """A valid record of some kind with hostile values put in a few places."""
    raw = record(draw(st.sampled_from(KINDS)))
    for _ in range(draw(st.integers(0, 3))):
        where = draw(st.sampled_from(["envelope", "data"]))
        target = raw["data"] if where == "data" and isinstance(raw.get("data"), dict) else raw
        key = draw(st.one_of(st.sampled_from(sorted(target) or ["x"]), hostile_text))
        target[key] = draw(json_values)
    return raw


def _dumps(value) -> bytes:
    # The standard library writes NaN, Infinity and lone surrogates (as \\udc00 escapes).
    return json.dumps(value).encode()


@st.composite
def nested(draw) -> bytes:
    depth = draw(st.integers(200, 3000))
    leaf = draw(st.sampled_from([b"1", b'"a\\u0000b"', b"NaN", b'"\\udc00"']))
    opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
    inner = opener * depth + leaf + closer * depth
    return b'{"records": [' + _dumps(record()) + b', {"kind": "notice", "data": ' + inner + b"}]}"


bodies = st.one_of(
    st.binary(max_size=200),
    st.builds(_dumps, bent_record()),
    st.builds(lambda rs: _dumps({"records": rs}), st.lists(bent_record(), max_size=4)),
    st.builds(lambda rs: b"\n".join(_dumps(r) for r in rs), st.lists(bent_record(), max_size=4)),
    st.builds(lambda v: _dumps(v), json_values),
    st.builds(lambda b, r: _dumps(r)[:-1] + b + b"}", st.binary(max_size=8), bent_record()),
    nested(),
)
content_types = st.sampled_from(
    ["application/json", "application/x-ndjson", "application/json; charset=latin-1", "text/x"]
)


# --- the ingest body decoder -------------------------------------------------------------------
@BOUNDED
@given(body=bodies, content_type=content_types)
def test_any_body_decodes_to_records_or_a_named_error_and_every_record_can_be_stored(
    body, content_type
):
    try:
        parsed = parse_body(body, content_type)
    except APIException as exc:
        assert 400 <= exc.status_code < 500 and str(exc.detail)
        return
    answer = [{"index": i, "errors": errors} for i, errors in parsed.unreadable]
    for index, raw in parsed.records:
        result = normalise(raw, now=NOW, scrub=parsed.scrub)
        if isinstance(result, NormalisedRecord):
            # What the store writes must be valid UTF-8 JSON (COPY and jsonb refuse the rest).
            for text in (result.data_json, result.derived_json, result.run_id, result.record_key):
                text.encode("utf-8")
            orjson.loads(result.data_json)
        else:
            assert result and all(isinstance(m, str) for ms in result.values() for m in ms)
            answer.append({"index": index, "errors": result})
    orjson.dumps(answer)  # the 207's body encodes: no surrogate echoed back


# --- parameters --------------------------------------------------------------------------------
@pytest.mark.django_db
@BOUNDED
@given(params=st.dictionaries(st.sampled_from(PARAMS), param_value, max_size=4))
def test_any_filter_parameters_parse_to_filters_that_query_or_a_named_error(params):
    try:
        filters = parse_filters(params)
    except FilterError as exc:
        assert exc.param in PARAMS and exc.message
        return
    list(filter_records(Record.objects.all(), filters)[:1])
    list(filter_runs(Run.objects.all(), filters)[:1])


@given(value=st.one_of(hostile_text, st.integers().map(str), st.just("1" * 5000)))
@BOUNDED
def test_any_limit_or_format_is_a_value_or_a_named_error(value):
    for reader, param in ((lambda v: parse_limit({"limit": v}), "limit"), (parse_format, "format")):
        try:
            reader(value)
        except FilterError as exc:
            assert exc.param == param and exc.message


@pytest.mark.django_db
@BOUNDED
@given(
    params=st.dictionaries(
        st.sampled_from(["rule", "group", "state", "reason", "from", "to"]),
        st.one_of(param_value, st.sampled_from(["²", "9" * 30, "-1", "1"])),
        max_size=4,
    )
)
def test_any_alert_history_filters_query_or_are_a_named_error(params):
    try:
        events = filter_events(AlertEvent.objects.all(), params)
    except FilterError as exc:
        assert exc.param in params and exc.message
        return
    list(events[:1])


# --- cursors -----------------------------------------------------------------------------------
def _cursor(values) -> str:
    return base64.urlsafe_b64encode(json.dumps(values).encode()).decode().rstrip("=")


cursor_values = st.lists(
    st.one_of(rfc3339(), st.integers(min_value=-(2**64), max_value=2**64), json_scalars),
    max_size=3,
)
cursors = st.one_of(hostile_text, st.builds(_cursor, cursor_values))


@pytest.mark.django_db
@BOUNDED
@given(cursor=cursors)
def test_any_api_cursor_pages_or_is_a_named_error(cursor):
    for keyset, queryset in (
        (Keyset((("ts", datetime), ("id", int))), Record.objects.all()),
        (Keyset((("id", int),), descending=True), Run.objects.all()),
    ):
        try:
            values = keyset.decode(cursor)
        except FilterError as exc:
            assert exc.param == "cursor"
            continue
        list(queryset.filter(keyset.after(values)).order_by(*keyset.order_by)[:1])


@pytest.mark.django_db
@BOUNDED
@given(cursor=cursors, sort=st.sampled_from(sorted(SORTS)), descending=st.booleans())
def test_any_runs_page_cursor_pages_or_is_a_damaged_link(cursor, sort, descending):
    try:
        keyset_page(Run.objects.all(), Sort(sort, descending), cursor)
    except CursorError:
        pass

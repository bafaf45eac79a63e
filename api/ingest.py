"""POST /api/v1/records — the front door (DESIGN §2).

DRF handles the endpoint, authentication, the rate limit and error responses; the body is decoded
with msgspec and validated per record by `records.normalise` instead of a DRF serializer, which
would cap ingest at a few thousand records a second. Records are committed before the 2xx.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import msgspec
from django.conf import settings
from django.utils import timezone
from rest_framework import status
from rest_framework.exceptions import ParseError, UnsupportedMediaType
from rest_framework.response import Response
from rest_framework.views import APIView

from api.auth import CanIngest
from api.encoding import inflate
from api.throttles import KeyRateThrottle
from ops.instruments import count_api_ingest
from records.normalise import Limits, NormalisedRecord, normalise
from records.store import store_records
from workers.dispatch import request_catch_up

JSON_TYPES = {"application/json"}
NDJSON_TYPES = {"application/x-ndjson", "application/ndjson", "application/jsonl"}
_decoder = msgspec.json.Decoder()


class PayloadTooLarge(ParseError):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "payload_too_large"


@dataclass
class ParsedBody:
    """The posted records as raw JSON values, plus lines that were not JSON at all."""

    records: list[tuple[int, Any]] = field(default_factory=list)
    unreadable: list[tuple[int, str]] = field(default_factory=list)
    # True when the body may hold NUL characters or non-finite numbers (see normalise's scrub).
    scrub: bool = False


class IngestView(APIView):
    permission_classes = [CanIngest]
    throttle_classes = [KeyRateThrottle]
    parser_classes: list = []  # the body is read raw below

    def post(self, request):
        body = _read_body(request)
        parsed = parse_body(body, request.content_type or "")
        now = timezone.now()
        options = settings.DECISIONBOARD
        limits = Limits(
            max_data_bytes=options["MAX_DATA_BYTES"],
            max_future=timedelta(seconds=options["MAX_FUTURE_SECONDS"]),
        )
        rejected = [
            {"index": index, "id": None, "errors": {"record": [message]}}
            for index, message in parsed.unreadable
        ]
        valid: list[NormalisedRecord] = []
        for index, raw in parsed.records:
            result = normalise(raw, now=now, limits=limits, scrub=parsed.scrub)
            if isinstance(result, NormalisedRecord):
                valid.append(result)
            else:
                rejected.append({"index": index, "id": _posted_id(raw), "errors": result})
        stored = store_records(request.auth.project_id, valid, now)
        count_api_ingest(request.auth.project, parsed.records, rejected, valid, stored, now)
        if stored.accepted:
            request_catch_up()  # after the commit; best effort
        rejected.sort(key=lambda r: r["index"])
        return Response(
            {"accepted": stored.accepted, "duplicates": stored.duplicates, "rejected": rejected},
            status=status.HTTP_207_MULTI_STATUS if rejected else status.HTTP_200_OK,
        )


def _read_body(request) -> bytes:
    limit = settings.DECISIONBOARD["INGEST_MAX_BODY"]
    too_large = f"The body is over the {limit:,}-byte limit; send smaller batches."
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise ParseError("Content-Length is not a number.") from None
    if declared > limit:
        raise PayloadTooLarge(too_large)
    body = request._request.read(limit + 1)
    if len(body) > limit:
        raise PayloadTooLarge(too_large)
    return inflate(body, request.META.get("HTTP_CONTENT_ENCODING"), limit, PayloadTooLarge)


def parse_body(body: bytes, content_type: str) -> ParsedBody:
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type in NDJSON_TYPES:
        return _parse_ndjson(body)
    if media_type not in JSON_TYPES:
        raise UnsupportedMediaType(
            media_type or "(none)",
            detail=f"Content type {media_type or '(none)'!r} is not accepted; send "
            "application/json or application/x-ndjson.",
        )
    value, scrub = _decode(body)
    if isinstance(value, dict) and "records" in value and "kind" not in value:
        batch = value["records"]
        if not isinstance(batch, list):
            raise ParseError('"records" must be an array of records.')
        return ParsedBody(records=list(enumerate(batch)), scrub=scrub)
    if isinstance(value, dict):
        return ParsedBody(records=[(0, value)], scrub=scrub)
    raise ParseError(
        'The body must be one record (an object with "kind"), {"records": [...]}, or NDJSON.'
    )


def _decode(text: bytes) -> tuple[Any, bool]:
    """Decode JSON fast; fall back to the standard library for numbers msgspec refuses.

    msgspec rejects a whole document for one number beyond the float range (1e400) and for the
    NaN/Infinity literals; the fallback decodes them so that only the record holding one is
    rejected ("must be a finite number") and its neighbours are kept.
    """
    if not text.strip():
        raise ParseError("The body is empty.")
    scrub = b"\\u0000" in text
    try:
        return _decoder.decode(text), scrub
    except msgspec.ValidationError:
        pass  # "Number out of range": retry below
    except msgspec.DecodeError as exc:
        if not any(token in text for token in (b"NaN", b"Infinity")):
            raise ParseError(f"The body is not valid JSON: {exc}.") from None
    try:
        return json.loads(text), True
    except (ValueError, RecursionError) as exc:
        raise ParseError(f"The body is not valid JSON: {exc}.") from None


def _parse_ndjson(body: bytes) -> ParsedBody:
    parsed = ParsedBody()
    index = 0
    for line in body.split(b"\n"):
        if not line.strip():
            continue
        try:
            value, scrub = _decode(line)
            parsed.records.append((index, value))
            parsed.scrub = parsed.scrub or scrub
        except ParseError as exc:
            parsed.unreadable.append((index, f"line {index + 1}: {exc.detail}"))
        index += 1
    if not parsed.records and not parsed.unreadable:
        raise ParseError("The body is empty.")
    return parsed


def _posted_id(raw: Any) -> str | None:
    value = raw.get("id") if isinstance(raw, dict) else None
    return value if isinstance(value, str) else None

"""POST /api/v1/records — the front door (docs/api.md, "Ingest").

DRF handles the endpoint, authentication, the rate limit and error responses; the body is decoded
with msgspec (api.bodies) and its records judged and stored by `records.store.ingest` instead of a
DRF serializer, which would cap ingest at a few thousand records a second. Records are committed
before the 2xx.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone
from rest_framework import status
from rest_framework.exceptions import AuthenticationFailed, ParseError, UnsupportedMediaType
from rest_framework.response import Response
from rest_framework.views import APIView

from api.auth import KEY_REFUSED, CanIngest
from api.bodies import SURROGATE_MESSAGE, decode_json, may_hold_surrogates, surrogate_path
from api.body_reader import read_body
from api.throttles import KeyRateThrottle
from ops.instruments import count_api_ingest
from records.collector import collector_paused
from records.store.ingest import IngestResult, ingest
from records.store.writer import ProjectGone
from workers.dispatch import request_catch_up

JSON_TYPES = {"application/json"}
NDJSON_TYPES = {"application/x-ndjson", "application/ndjson", "application/jsonl"}


@dataclass
class ParsedBody:
    """The posted records as raw JSON values, plus those that cannot be read at all (an NDJSON
    line that is not JSON, a record holding a lone surrogate)."""

    records: list[tuple[int, Any]] = field(default_factory=list)
    # Records that cannot be read at all, with their errors by field path.
    unreadable: list[tuple[int, dict[str, list[str]]]] = field(default_factory=list)
    # True when the body may hold NUL characters or non-finite numbers (see normalise's scrub).
    scrub: bool = False


class IngestView(APIView):
    permission_classes = [CanIngest]
    throttle_classes = [KeyRateThrottle]
    parser_classes: list = []  # the body is read raw below

    def post(self, request):
        body = read_body(request)
        now = timezone.now()
        # A batch decodes into tens of thousands of objects, none in a cycle: the collector
        # stays off until they are freed, so that no collection walks them (records.collector).
        with collector_paused():
            answer = self._store(request, body, now)
        if answer.accepted:
            request_catch_up(request.auth.project_id)  # after the commit; best effort
        return Response(
            answer.body(),
            status=status.HTTP_207_MULTI_STATUS if answer.rejected else status.HTTP_200_OK,
        )

    @staticmethod
    def _store(request, body: bytes, now) -> IngestResult:
        """Judge and store the body's records and count them; the result without its records,
        so that they are freed as this returns."""
        parsed = parse_body(body, request.content_type or "")
        try:
            result = ingest(
                request.auth.project_id,
                parsed.records,
                now=now,
                scrub=parsed.scrub,
                unreadable=parsed.unreadable,
            )
        except ProjectGone:  # deleted since its key was read (api.auth keeps keys briefly)
            raise AuthenticationFailed(KEY_REFUSED) from None
        count_api_ingest(
            request.auth.project,
            parsed.records,
            result.rejected,
            result.valid,
            result.accepted_by_kind,
        )
        result.valid = []
        return result


def parse_body(body: bytes, content_type: str) -> ParsedBody:
    """The records of a posted body, or ParseError (400) / UnsupportedMediaType (415).

    Never raises anything else, whatever the bytes: records that cannot be read (a line that is
    not JSON, a record holding a lone surrogate) are listed in `unreadable` by index.
    """
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type in NDJSON_TYPES:
        return _parse_ndjson(body)
    if media_type not in JSON_TYPES:
        raise UnsupportedMediaType(
            media_type or "(none)",
            detail=f"Content type {media_type or '(none)'!r} is not accepted; send "
            "application/json or application/x-ndjson.",
        )
    value, scrub = decode_json(body, lenient_numbers=True)
    parsed = ParsedBody(scrub=scrub)
    # Only the standard library's path (scrub) can return a lone surrogate, and only from an
    # escape in the text: the walk runs for those bodies alone.
    surrogates = scrub and may_hold_surrogates(body)
    if isinstance(value, dict) and "records" in value and "kind" not in value:
        batch = value["records"]
        if not isinstance(batch, list):
            raise ParseError('"records" must be an array of records.')
        if surrogates:
            outside = surrogate_path({k: v for k, v in value.items() if k != "records"})
            if outside is not None:
                raise ParseError(f"{outside} {SURROGATE_MESSAGE}.")
        for index, raw in enumerate(batch):
            _add(parsed, index, raw, surrogates)
        return parsed
    if isinstance(value, dict):
        _add(parsed, 0, value, surrogates)
        return parsed
    raise ParseError(
        'The body must be one record (an object with "kind"), {"records": [...]}, or NDJSON.'
    )


def _add(parsed: ParsedBody, index: int, raw: Any, check_surrogates: bool) -> None:
    """Queue a record for normalise, or list it as unreadable when it holds a lone surrogate."""
    where = surrogate_path(raw) if check_surrogates else None
    if where is None:
        parsed.records.append((index, raw))
    else:
        parsed.unreadable.append((index, {where: [SURROGATE_MESSAGE]}))


def _parse_ndjson(body: bytes) -> ParsedBody:
    parsed = ParsedBody()
    index = 0
    for line in body.split(b"\n"):
        if not line.strip():
            continue
        try:
            value, scrub = decode_json(line, lenient_numbers=True)
        except ParseError as exc:
            parsed.unreadable.append((index, {"record": [f"line {index + 1}: {exc.detail}"]}))
        else:
            _add(parsed, index, value, scrub and may_hold_surrogates(line))
            parsed.scrub = parsed.scrub or scrub
        index += 1
    if not parsed.records and not parsed.unreadable:
        raise ParseError("The body is empty.")
    return parsed

"""POST /api/v1/records — the front door (docs/api.md, "Ingest").

DRF handles the endpoint, authentication, the rate limit and error responses; the body is read by
api.body_reader, decoded with msgspec (api.bodies) instead of a DRF serializer, which would cap
ingest at a few thousand records a second, and written by api.record_writes, the one write of
every transport. Records are committed before the 2xx.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from rest_framework import status
from rest_framework.exceptions import AuthenticationFailed, ParseError, UnsupportedMediaType
from rest_framework.response import Response
from rest_framework.views import APIView

from api.auth import KEY_REFUSED, CanIngest
from api.bodies import SURROGATE_MESSAGE, decode_json, may_hold_surrogates, surrogate_path
from api.body_reader import read_body
from api.record_writes import Posted, write_records
from api.throttles import KeyRateThrottle
from records.store.writer import ProjectGone

JSON_TYPES = {"application/json"}
NDJSON_TYPES = {"application/x-ndjson", "application/ndjson", "application/jsonl"}


class IngestView(APIView):
    permission_classes = [CanIngest]
    throttle_classes = [KeyRateThrottle]
    parser_classes: list = []  # the body is read raw below

    def post(self, request):
        body = read_body(request)
        content_type = request.content_type or ""
        try:
            answer = write_records(
                request.auth.project, lambda: parse_body(body, content_type), now=timezone.now()
            )
        except ProjectGone:  # deleted since its key was read (api.auth keeps keys briefly)
            raise AuthenticationFailed(KEY_REFUSED) from None
        return Response(
            answer.body(),
            status=status.HTTP_207_MULTI_STATUS if answer.rejected else status.HTTP_200_OK,
        )


def parse_body(body: bytes, content_type: str) -> Posted:
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
    parsed = Posted(scrub=scrub)
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


def _add(parsed: Posted, index: int, raw: Any, check_surrogates: bool) -> None:
    """Queue a record for normalise, or list it as unreadable when it holds a lone surrogate."""
    where = surrogate_path(raw) if check_surrogates else None
    if where is None:
        parsed.records.append((index, raw))
    else:
        parsed.unreadable.append((index, {where: [SURROGATE_MESSAGE]}))


def _parse_ndjson(body: bytes) -> Posted:
    parsed = Posted()
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

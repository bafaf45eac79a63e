"""The body of a POST that carries records, read off the WSGI input: the one place that knows how
a server frames a body (docs/api.md, "Limits").

`read_body(request)` returns the whole body, inflated, or raises a DRF error: 413 over the
limit (after reading what was sent, so that the client sees the answer, not a reset), 411 for a
chunked body the server did not terminate, 400 for broken chunked framing. Under gunicorn a
Content-Length body is read through its length reader; any other server through Django's
request stream.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from gunicorn.http.body import LengthReader
from gunicorn.http.errors import (
    ChunkMissingTerminator,
    InvalidChunkSize,
    NoMoreData,
    ParseException,
)
from rest_framework import status
from rest_framework.exceptions import ParseError

from api.encoding import inflate


class PayloadTooLarge(ParseError):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "payload_too_large"


class LengthRequired(ParseError):
    status_code = status.HTTP_411_LENGTH_REQUIRED
    default_code = "length_required"
    default_detail = "This server cannot read a chunked body here; send Content-Length."


def read_body(request) -> bytes:
    """The body of `request` (Django's or DRF's), inflated when it came gzip- or
    deflate-encoded, at most the limit (413)."""
    limit = settings.DECISIONBOARD["INGEST_MAX_BODY"]
    encoding = request.META.get("HTTP_CONTENT_ENCODING")
    return inflate(_read_raw(request), encoding, limit, PayloadTooLarge)


def _read_raw(request) -> bytes:
    """The raw body, at most the limit; 413 beyond it, after reading what was sent.

    A server that closes the connection while the client is still uploading makes the client
    see a reset instead of the 413, so the rest of an over-limit body is read and dropped, up
    to twice the limit; past that the connection is closed with the answer (a client sending
    gigabytes is not waited for). A chunked body (no Content-Length) is read from the server's
    terminated input stream, which Django's request stream would read as empty.
    """
    limit = settings.DECISIONBOARD["INGEST_MAX_BODY"]
    too_large = f"The body is over the {limit:,}-byte limit; send smaller batches."
    meta = request.META
    chunked = "chunked" in meta.get("HTTP_TRANSFER_ENCODING", "").lower()
    if chunked and not meta.get("CONTENT_LENGTH"):
        if not meta.get("wsgi.input_terminated"):
            raise LengthRequired()
        stream = meta["wsgi.input"]
        with _chunk_framing():
            body = _read_up_to(stream, limit + 1)
            if len(body) > limit:
                _discard(stream, limit)
                raise PayloadTooLarge(too_large)
        return body
    try:
        declared = int(meta.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise ParseError("Content-Length is not a number.") from None
    if declared > limit:
        if declared <= 2 * limit:
            _discard(request, declared)
        raise PayloadTooLarge(too_large)
    stream = meta.get("wsgi.input")
    reader = getattr(stream, "reader", None)
    if isinstance(reader, LengthReader) and stream.buf.tell() == 0:
        # gunicorn's input stream hands a body out 1 KB at a time, each piece cut from an 8 KB
        # socket read with the rest put back, so a large batch cost hundreds of copies; its
        # reader for a Content-Length body reads it whole. The stream has not been read from
        # (its buffer is empty), so the reader holds the body from its start.
        return reader.read(limit + 1)
    return request.read(limit + 1)


_CHUNK = 64 * 1024


@contextmanager
def _chunk_framing() -> Iterator[None]:
    """Broken chunked framing as a 400 naming what is wrong, not a 500.

    gunicorn decodes the chunks as the body is read, so its framing errors surface here, raised
    by the input stream (every endpoint that posts records reads its body here).
    """
    try:
        yield
    except InvalidChunkSize as exc:
        raise ParseError(
            f"The chunked body has a chunk size line that is not hexadecimal ({exc.data!r})."
        ) from None
    except ChunkMissingTerminator:
        raise ParseError(
            "The chunked body has a chunk longer than its size line says (no CRLF where it "
            "should end)."
        ) from None
    except NoMoreData:
        raise ParseError(
            "The chunked body ended before its last chunk (a chunk of size 0)."
        ) from None
    except ParseException as exc:  # the trailer's fields, parsed as headers
        raise ParseError(f"The chunked body's trailer is malformed: {exc}.") from None


def _read_up_to(stream, size: int) -> bytes:
    parts, left = [], size
    while left > 0:
        part = stream.read(min(_CHUNK, left))
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def _discard(stream, size: int) -> None:
    left = size
    while left > 0:
        part = stream.read(min(_CHUNK, left))
        if not part:
            return
        left -= len(part)

"""Request bodies sent with Content-Encoding: gzip or deflate (the Python client, OTLP
exporters), inflated under the same size limit as a plain body so a small bomb cannot expand
into memory."""

from __future__ import annotations

import zlib

from rest_framework import status
from rest_framework.exceptions import APIException, ParseError

# zlib's wbits: gzip framing, and deflate as HTTP means it (zlib framing).
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class UnsupportedEncoding(APIException):
    status_code = status.HTTP_415_UNSUPPORTED_MEDIA_TYPE
    default_code = "unsupported_encoding"


def inflate(body: bytes, content_encoding: str | None, limit: int, too_large: type) -> bytes:
    """The body decoded per its Content-Encoding; `too_large` (an exception class) past `limit`
    bytes after decoding."""
    encoding = (content_encoding or "").strip().lower()
    if encoding in ("", "identity"):
        return body
    wbits = _WBITS.get(encoding)
    if wbits is None:
        raise UnsupportedEncoding(
            f"Content-Encoding {encoding!r} is not accepted; send gzip, deflate or none."
        )
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise ParseError(f"The body is not valid {encoding}: {exc}.") from None
    if len(out) > limit:
        raise too_large(
            f"The body is over the {limit:,}-byte limit once decompressed; send smaller batches."
        )
    if not inflater.eof:
        raise ParseError(f"The {encoding} body is truncated.")
    return out

"""A run id in a page's path (`/runs/<run id>/`, its picks, its fallback chain).

A run id is any string the agent chose. Most go in the path as they are, percent-encoded by
`reverse`, so a link reads like the id. Three kinds could not, and go as "~" and the base64url
of their UTF-8 instead, which no id put as it is takes:

- an id ending in "/picks/<n>": its page's path would be the pick page of another run;
- an id with a "." or ".." segment: browsers resolve those in a path before sending it;
- an id starting with "~", so that the encoded form is never ambiguous.
"""

from __future__ import annotations

import base64
import binascii
import re

ENCODED = "~"
_PICK_TAIL = re.compile(r"/picks/[0-9]+\Z")


def needs_encoding(run_id: str) -> bool:
    return (
        run_id.startswith(ENCODED)
        or _PICK_TAIL.search(run_id) is not None
        or any(segment in (".", "..") for segment in run_id.split("/"))
    )


def to_path(run_id: str) -> str:
    if not needs_encoding(run_id):
        return run_id
    return ENCODED + base64.urlsafe_b64encode(run_id.encode()).decode().rstrip("=")


def from_path(value: str) -> str:
    """The run id of a path's part; ValueError (no such page) for a bad encoded form."""
    if not value.startswith(ENCODED):
        return value
    text = value[len(ENCODED) :]
    try:
        run_id = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ValueError(value) from exc
    if not needs_encoding(run_id) or to_path(run_id) != value:
        raise ValueError(value)  # one path per run: never an alias of another
    return run_id


class RunIdConverter:
    """`<run_id:...>` in dashboard.urls: any string, slashes too, as `path` takes it."""

    regex = ".+"

    def to_python(self, value: str) -> str:
        return from_path(value)

    def to_url(self, value: str) -> str:
        return to_path(value)

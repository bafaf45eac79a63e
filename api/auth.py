"""API keys on `Authorization: Bearer <key>`: the key names the project, its scope the rights.

A process keeps each live key it has looked up for API_KEY_CACHE_SECONDS (DECISIONBOARD), so that
a stream of ingest batches or reads costs no query a request: a key revoked (or its project
deleted) is refused by every process at most that long afterwards. An unknown key is never kept,
so a key issued a moment ago works at once. Keys are read on the primary, even by a request whose
reads go to a replica (config.replicas): an agent has no cookie to pin it to a key just made. The
lookup also marks the key's use (records.store.key_lookup), so a request with a cached key
reaches the primary not at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from time import monotonic

from django.conf import settings
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import BasePermission

from records.models import ApiKey, Project, hash_key
from records.store.key_lookup import find_live_key

KEY_REFUSED = "Unknown or revoked API key."


@dataclass(frozen=True)
class KeyPrincipal:
    """What `request.user` is for a request made with an API key."""

    project: Project
    is_authenticated: bool = True


def key_for_authorization(header: bytes) -> ApiKey | None:
    """The live key an Authorization value (`Bearer <key>`) names, None when the value is
    empty; AuthenticationFailed when it is malformed or names no live key. The HTTP API and
    the OTLP/gRPC receiver (its `authorization` metadata) both ask here."""
    parts = header.split()
    if not parts:
        return None
    if parts[0].lower() != b"bearer" or len(parts) != 2:
        raise AuthenticationFailed("Use the header Authorization: Bearer <api key>.")
    try:
        raw = parts[1].decode("ascii")
    except UnicodeDecodeError:
        raise AuthenticationFailed(KEY_REFUSED) from None
    key = live_key(hash_key(raw))
    if key is None:
        raise AuthenticationFailed(KEY_REFUSED)
    return key


# key_hash -> (monotonic time it was read, the key); entries are replaced whole, never mutated in
# place, so the threads of a worker can share it.
_live_keys: dict[str, tuple[float, ApiKey]] = {}
# Past this many keys the cache starts over rather than grow with every key ever seen.
_LIVE_KEYS_MAX = 1_000


def live_key(key_hash: str) -> ApiKey | None:
    """The unrevoked key with this hash (its project loaded), from this process's cache when it
    was read less than API_KEY_CACHE_SECONDS ago; read (and its use marked) on the primary
    otherwise."""
    ttl = settings.DECISIONBOARD["API_KEY_CACHE_SECONDS"]
    now = monotonic()
    cached = _live_keys.get(key_hash)
    if cached is not None and now - cached[0] < ttl:
        return cached[1]
    key = find_live_key(key_hash)
    if key is None or ttl <= 0:
        _live_keys.pop(key_hash, None)
        return key
    if len(_live_keys) >= _LIVE_KEYS_MAX:
        _live_keys.clear()
    _live_keys[key_hash] = (now, key)
    return key


class ApiKeyAuthentication(BaseAuthentication):
    def authenticate(self, request):
        key = key_for_authorization(get_authorization_header(request))
        if key is None:
            return None
        return KeyPrincipal(key.project), key

    def authenticate_header(self, request) -> str:
        # Present so that DRF answers 401 (not 403) when the key is missing or wrong.
        return 'Bearer realm="decisionboard"'


class CanIngest(BasePermission):
    message = "This API key lacks the ingest scope."

    def has_permission(self, request, view) -> bool:
        key = request.auth
        return isinstance(key, ApiKey) and key.allows(ApiKey.Scope.INGEST)

"""API keys on `Authorization: Bearer <key>`: the key names the project, its scope the rights."""

from __future__ import annotations

from dataclasses import dataclass

from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import BasePermission

from records.models import ApiKey, Project, hash_key


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
        raise AuthenticationFailed("Unknown or revoked API key.") from None
    key = (
        ApiKey.objects.select_related("project")
        .filter(key_hash=hash_key(raw), revoked_at__isnull=True)
        .first()
    )
    if key is None:
        raise AuthenticationFailed("Unknown or revoked API key.")
    key.note_use()
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

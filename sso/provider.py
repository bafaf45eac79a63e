"""The provider's endpoints and the settings mozilla-django-oidc asks for, from config.oidc.

The endpoints come from the environment when it names them all, else from the issuer's
discovery document (`<issuer>/.well-known/openid-configuration`), fetched on the first sign-in
and kept for an hour: a provider that moves its endpoints is followed without a restart, and a
provider down at start-up does not stop Decisionboard (password login and the pages work on).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import requests
from django.conf import settings
from mozilla_django_oidc.utils import import_from_settings

from config.oidc import OidcSettings
from sso.refusals import SignInRefused

DISCOVERY_TTL_SECONDS = 3600
TIMEOUT_SECONDS = 10


@dataclass(frozen=True)
class ProviderEndpoints:
    authorization_endpoint: str
    token_endpoint: str
    userinfo_endpoint: str
    jwks_uri: str


class DiscoveryCache:
    """One discovered document per issuer, per process, for DISCOVERY_TTL_SECONDS."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.found: dict[str, tuple[float, dict]] = {}

    def document(self, issuer: str) -> dict:
        with self.lock:
            held = self.found.get(issuer)
            if held is not None and time.monotonic() - held[0] < DISCOVERY_TTL_SECONDS:
                return held[1]
        url = f"{issuer}/.well-known/openid-configuration"
        try:
            answer = requests.get(url, timeout=TIMEOUT_SECONDS)
            answer.raise_for_status()
            document = answer.json()
        except (requests.RequestException, ValueError) as exc:
            raise SignInRefused(
                f"The sign-in provider could not be reached ({url}): {exc}", status=502
            ) from None
        with self.lock:
            self.found[issuer] = (time.monotonic(), document)
        return document


DISCOVERY = DiscoveryCache()


def oidc() -> OidcSettings:
    return settings.OIDC


def endpoints(config: OidcSettings | None = None) -> ProviderEndpoints:
    config = config or oidc()
    named = {
        "authorization_endpoint": config.authorization_endpoint,
        "token_endpoint": config.token_endpoint,
        "userinfo_endpoint": config.userinfo_endpoint,
        "jwks_uri": config.jwks_uri,
    }
    if not all(named.values()):
        document = DISCOVERY.document(config.issuer)
        named = {key: value or document.get(key, "") for key, value in named.items()}
    return ProviderEndpoints(**named)


def library_setting(name: str, *default):
    """mozilla-django-oidc's setting `name`, as this configuration makes it."""
    config = oidc()
    answers = {
        "OIDC_RP_CLIENT_ID": lambda: config.client_id,
        "OIDC_RP_CLIENT_SECRET": lambda: config.client_secret,
        "OIDC_RP_SCOPES": lambda: config.scopes,
        "OIDC_RP_SIGN_ALGO": lambda: config.sign_algorithm,
        "OIDC_OP_AUTHORIZATION_ENDPOINT": lambda: endpoints(config).authorization_endpoint,
        "OIDC_OP_TOKEN_ENDPOINT": lambda: endpoints(config).token_endpoint,
        "OIDC_OP_USER_ENDPOINT": lambda: endpoints(config).userinfo_endpoint,
        "OIDC_OP_JWKS_ENDPOINT": lambda: endpoints(config).jwks_uri,
        "OIDC_AUTHENTICATION_CALLBACK_URL": lambda: "sso-callback",
        # PKCE as well as the client secret: a stolen code is worth nothing on its own.
        "OIDC_USE_PKCE": lambda: True,
        "OIDC_USE_NONCE": lambda: True,
        "OIDC_TIMEOUT": lambda: TIMEOUT_SECONDS,
        "OIDC_CREATE_USER": lambda: True,
    }
    if name in answers:
        return answers[name]()
    return import_from_settings(name, *default)

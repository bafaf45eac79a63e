"""Single sign-on with OpenID Connect, as the environment configures it (docs/access.md).

Off unless DECISIONBOARD_OIDC_CLIENT_ID is set. The `sso` package does the sign-in with
mozilla-django-oidc; this module only reads and checks the settings, so that a malformed value
stops start-up naming its variable, as every other setting does (config.env).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_str

# records.models.Role's values: settings are read before the models can be imported.
ROLE_NAMES = ("viewer", "editor", "admin")


@dataclass(frozen=True)
class OidcSettings:
    """What the sign-in needs. `enabled` False: no button, no sign-in, password login only."""

    enabled: bool = False
    name: str = "single sign-on"
    issuer: str = ""
    # Explicit endpoints win over the issuer's discovery document (sso.discovery).
    authorization_endpoint: str = ""
    token_endpoint: str = ""
    userinfo_endpoint: str = ""
    jwks_uri: str = ""
    client_id: str = ""
    client_secret: str = ""
    scopes: str = "openid email profile"
    # The ID token's `aud` must name one of these.
    audiences: tuple[str, ...] = ()
    groups_claim: str = "groups"
    # group -> project name -> role (a Role's value).
    roles: dict[str, dict[str, str]] = field(default_factory=dict)
    password_login: bool = True
    sign_algorithm: str = "RS256"


def parse_roles(text: str, variable: str = "DECISIONBOARD_OIDC_ROLES") -> dict[str, dict[str, str]]:
    """'{"group": {"project": "admin"}}' -> the mapping, every role checked."""
    try:
        mapping = json.loads(text)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{variable} is not JSON: {exc}") from None
    roles = set(ROLE_NAMES)
    if not isinstance(mapping, dict):
        raise ImproperlyConfigured(f"{variable} must be an object: group -> project -> role")
    for group, projects in mapping.items():
        if not isinstance(projects, dict) or not all(
            isinstance(project, str) and role in roles for project, role in projects.items()
        ):
            raise ImproperlyConfigured(
                f"{variable}: the group {group!r} must map project names to one of "
                f"{', '.join(sorted(roles))}"
            )
    return mapping


def oidc_from_environment() -> OidcSettings:
    client_id = env_str("DECISIONBOARD_OIDC_CLIENT_ID", "")
    password_login = env_bool("DECISIONBOARD_OIDC_PASSWORD_LOGIN", True)
    if not client_id:
        if not password_login:
            raise ImproperlyConfigured(
                "DECISIONBOARD_OIDC_PASSWORD_LOGIN=off needs single sign-on "
                "(DECISIONBOARD_OIDC_CLIENT_ID): nobody could log in"
            )
        return OidcSettings()
    issuer = (env_str("DECISIONBOARD_OIDC_ISSUER", "") or "").rstrip("/")
    endpoints = {
        "authorization_endpoint": env_str("DECISIONBOARD_OIDC_AUTHORIZATION_ENDPOINT", ""),
        "token_endpoint": env_str("DECISIONBOARD_OIDC_TOKEN_ENDPOINT", ""),
        "userinfo_endpoint": env_str("DECISIONBOARD_OIDC_USERINFO_ENDPOINT", ""),
        "jwks_uri": env_str("DECISIONBOARD_OIDC_JWKS_URI", ""),
    }
    if not issuer and not all(endpoints.values()):
        raise ImproperlyConfigured(
            "DECISIONBOARD_OIDC_CLIENT_ID needs DECISIONBOARD_OIDC_ISSUER, or all four of "
            "DECISIONBOARD_OIDC_AUTHORIZATION_ENDPOINT, _TOKEN_ENDPOINT, _USERINFO_ENDPOINT "
            "and _JWKS_URI"
        )
    secret = env_str("DECISIONBOARD_OIDC_CLIENT_SECRET", "")
    if not secret:
        raise ImproperlyConfigured(
            "DECISIONBOARD_OIDC_CLIENT_ID needs DECISIONBOARD_OIDC_CLIENT_SECRET"
        )
    audience = env_str("DECISIONBOARD_OIDC_AUDIENCE", client_id)
    return OidcSettings(
        enabled=True,
        name=env_str("DECISIONBOARD_OIDC_NAME", "single sign-on"),
        issuer=issuer,
        **endpoints,
        client_id=client_id,
        client_secret=secret,
        scopes=env_str("DECISIONBOARD_OIDC_SCOPES", "openid email profile"),
        audiences=tuple(a.strip() for a in audience.split(",") if a.strip()),
        groups_claim=env_str("DECISIONBOARD_OIDC_GROUPS_CLAIM", "groups"),
        roles=parse_roles(env_str("DECISIONBOARD_OIDC_ROLES", "{}")),
        password_login=password_login,
        sign_algorithm=env_str("DECISIONBOARD_OIDC_SIGN_ALGORITHM", "RS256"),
    )

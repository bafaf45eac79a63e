"""The authentication backend of a single sign-on: mozilla-django-oidc's, stricter.

The library exchanges the code (with PKCE), checks the nonce and finds the signing key. Beyond
it, every ID token is checked here in full: its signature, `exp`, `iat`, its `aud` against
DECISIONBOARD_OIDC_AUDIENCE and its `iss` against DECISIONBOARD_OIDC_ISSUER. The account is the
one with the claims' e-mail, and only a verified e-mail (`email_verified` true) is trusted. Each
refusal raises SignInRefused with a reason the sign-in's page says (sso.views).
"""

from __future__ import annotations

import jwt
import requests
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from sso.memberships import groups_in, sign_in_actor, sync_memberships
from sso.provider import endpoints, library_setting, oidc
from sso.refusals import SignInRefused

# Seconds of clock difference with the provider that an ID token's times tolerate.
LEEWAY_SECONDS = 30


class OidcBackend(OIDCAuthenticationBackend):
    """Signs in with the provider's code; answers None to anything else (a password)."""

    def __init__(self, *args, **kwargs) -> None:
        # The library reads its endpoints here; they are read on a sign-in only (properties
        # below), so that a password login never waits on the provider's discovery.
        self.UserModel = get_user_model()

    def get_settings(self, attr, *args):
        return library_setting(attr, *args)

    @property
    def OIDC_OP_TOKEN_ENDPOINT(self) -> str:  # noqa: N802 (the library's name)
        return endpoints().token_endpoint

    @property
    def OIDC_OP_USER_ENDPOINT(self) -> str:  # noqa: N802
        return endpoints().userinfo_endpoint

    @property
    def OIDC_OP_JWKS_ENDPOINT(self) -> str:  # noqa: N802
        return endpoints().jwks_uri

    @property
    def OIDC_RP_CLIENT_ID(self) -> str:  # noqa: N802
        return oidc().client_id

    @property
    def OIDC_RP_CLIENT_SECRET(self) -> str:  # noqa: N802
        return oidc().client_secret

    @property
    def OIDC_RP_SIGN_ALGO(self) -> str:  # noqa: N802
        return oidc().sign_algorithm

    OIDC_RP_IDP_SIGN_KEY = None

    def authenticate(self, request, **kwargs):
        if request is None or not oidc().enabled:
            return None
        try:
            return super().authenticate(request, **kwargs)
        except requests.HTTPError as exc:
            # The token endpoint refused the code (used already, expired, or not this client's),
            # or the userinfo endpoint the access token.
            detail = exc.response.text[:300] if exc.response is not None else str(exc)
            raise SignInRefused(
                f"The provider refused this sign-in: {detail}. Start again from the login page.",
                status=400,
            ) from None
        except requests.RequestException as exc:
            raise SignInRefused(
                f"The sign-in provider could not be reached: {exc}", status=502
            ) from None

    def verify_token(self, token, **kwargs):
        if not token:
            raise SignInRefused("The provider sent no ID token.", status=400)
        try:
            return super().verify_token(token, **kwargs)
        except SuspiciousOperation as exc:
            # The key is not the provider's (no published key has the token's key id), or the
            # nonce is not this sign-in's.
            raise SignInRefused(f"The ID token was refused: {exc}", status=400) from None
        except jwt.PyJWTError as exc:
            # A published key that cannot be read, or a token header that cannot.
            raise SignInRefused(f"The ID token was refused: {exc}.", status=400) from None

    def get_payload_data(self, token, key):
        config = oidc()
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise SignInRefused("The ID token is not a JSON Web Token.", status=400) from None
        if header.get("alg") != config.sign_algorithm:
            raise SignInRefused(
                f"The ID token is signed with {header.get('alg')!r}, not {config.sign_algorithm}.",
                status=400,
            )
        try:
            payload = jwt.decode(
                token,
                key,
                algorithms=[config.sign_algorithm],
                audience=list(config.audiences),
                issuer=config.issuer or None,
                leeway=LEEWAY_SECONDS,
                options={"require": ["exp", "iat", "aud", "iss", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise SignInRefused("The ID token has expired.", status=401) from None
        except jwt.InvalidAudienceError:
            raise SignInRefused(
                "The ID token was issued for another application (its audience, aud, is not "
                f"{', '.join(config.audiences)}).",
                status=401,
            ) from None
        except jwt.InvalidIssuerError:
            raise SignInRefused(
                f"The ID token was issued by another provider than {config.issuer}.", status=401
            ) from None
        except jwt.InvalidSignatureError:
            raise SignInRefused(
                "The ID token's signature does not verify with the provider's key.", status=401
            ) from None
        except jwt.PyJWTError as exc:
            raise SignInRefused(f"The ID token is not valid: {exc}.", status=401) from None
        audiences = payload["aud"] if isinstance(payload["aud"], list) else [payload["aud"]]
        if len(audiences) > 1 and payload.get("azp") != config.client_id:
            raise SignInRefused(
                "The ID token names several audiences but was not issued to this application "
                "(azp).",
                status=401,
            )
        return payload

    def get_userinfo(self, access_token, id_token, payload):
        """The user's claims: the ID token's, completed by the userinfo endpoint's (which must
        be about the same subject)."""
        userinfo = super().get_userinfo(access_token, id_token, payload)
        if userinfo.get("sub") != payload.get("sub"):
            raise SignInRefused(
                "The provider's user information is about another user than the ID token.",
                status=401,
            )
        return {**payload, **userinfo}

    def verify_claims(self, claims) -> bool:
        email = claims.get("email")
        if not email:
            raise SignInRefused(
                "The provider did not say your e-mail address: ask for the email scope "
                "(DECISIONBOARD_OIDC_SCOPES).",
                status=403,
            )
        if claims.get("email_verified") not in (True, "true"):
            raise SignInRefused(
                f"Your e-mail address {email} is not verified at {oidc().name}: verify it "
                "there, then sign in again.",
                status=403,
            )
        return True

    def filter_users_by_claims(self, claims):
        users = self.UserModel.objects.filter(email__iexact=claims["email"])
        if users.count() > 1:
            raise SignInRefused(
                f"Several accounts have the e-mail address {claims['email']}: an administrator "
                "must give it to one only.",
                status=409,
            )
        return users

    def create_user(self, claims):
        email = claims["email"]
        username = email[:150]
        taken = self.UserModel.objects.filter(username__iexact=username).exists()
        number = 2
        while taken:
            username = f"{email[:140]}-{number}"
            taken = self.UserModel.objects.filter(username__iexact=username).exists()
            number += 1
        user = self.UserModel.objects.create_user(username, email=email)
        return self.update_user(user, claims)

    def update_user(self, user, claims):
        if not user.is_active:
            raise SignInRefused("This account is disabled.", status=403)
        config = oidc()
        sync_memberships(
            user,
            groups_in(claims, config.groups_claim),
            config.roles,
            actor=sign_in_actor(getattr(self, "request", None)),
        )
        return user

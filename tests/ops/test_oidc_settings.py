"""Single sign-on's settings (config.oidc): off unless a client id is set, and a malformed or
incomplete configuration stops start-up naming the variable."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.oidc import oidc_from_environment

ON = {
    "DECISIONBOARD_OIDC_CLIENT_ID": "decisionboard",
    "DECISIONBOARD_OIDC_CLIENT_SECRET": "s3cret",
    "DECISIONBOARD_OIDC_ISSUER": "https://id.example.com/",
}


@pytest.fixture
def environment(monkeypatch):
    for name in (
        *ON,
        "DECISIONBOARD_OIDC_ROLES",
        "DECISIONBOARD_OIDC_PASSWORD_LOGIN",
        "DECISIONBOARD_OIDC_AUDIENCE",
    ):
        monkeypatch.delenv(name, raising=False)

    def set_to(**values: str) -> None:
        for name, value in values.items():
            monkeypatch.setenv(name, value)

    return set_to


def test_it_is_off_unless_a_client_id_is_set(environment):
    config = oidc_from_environment()
    assert not config.enabled and config.password_login


def test_it_reads_the_whole_configuration(environment):
    environment(
        **ON,
        DECISIONBOARD_OIDC_AUDIENCE="decisionboard, portal",
        DECISIONBOARD_OIDC_ROLES='{"ops": {"acme": "admin"}, "all": {"acme": "viewer"}}',
        DECISIONBOARD_OIDC_PASSWORD_LOGIN="off",
        DECISIONBOARD_OIDC_NAME="Keycloak",
    )
    config = oidc_from_environment()
    assert config.enabled and config.name == "Keycloak"
    assert config.issuer == "https://id.example.com"
    assert config.audiences == ("decisionboard", "portal")
    assert config.roles == {"ops": {"acme": "admin"}, "all": {"acme": "viewer"}}
    assert not config.password_login
    assert config.groups_claim == "groups" and config.scopes == "openid email profile"


def test_the_audience_is_the_client_id_unless_set(environment):
    environment(**ON)
    assert oidc_from_environment().audiences == ("decisionboard",)


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"DECISIONBOARD_OIDC_PASSWORD_LOGIN": "off"}, "nobody could log in"),
        ({**ON, "DECISIONBOARD_OIDC_ISSUER": ""}, "needs DECISIONBOARD_OIDC_ISSUER"),
        ({**ON, "DECISIONBOARD_OIDC_CLIENT_SECRET": ""}, "DECISIONBOARD_OIDC_CLIENT_SECRET"),
        ({**ON, "DECISIONBOARD_OIDC_ROLES": "{ops: admin}"}, "DECISIONBOARD_OIDC_ROLES is not"),
        (
            {**ON, "DECISIONBOARD_OIDC_ROLES": '{"ops": {"acme": "owner"}}'},
            "the group 'ops' must map project names to one of admin, editor, viewer",
        ),
    ],
)
def test_a_wrong_configuration_stops_start_up_naming_it(environment, values, words):
    environment(**values)
    with pytest.raises(ImproperlyConfigured, match=words):
        oidc_from_environment()


def test_explicit_endpoints_stand_in_for_the_issuer(environment):
    environment(
        **{**ON, "DECISIONBOARD_OIDC_ISSUER": ""},
        DECISIONBOARD_OIDC_AUTHORIZATION_ENDPOINT="https://id.example.com/auth",
        DECISIONBOARD_OIDC_TOKEN_ENDPOINT="https://id.example.com/token",
        DECISIONBOARD_OIDC_USERINFO_ENDPOINT="https://id.example.com/me",
        DECISIONBOARD_OIDC_JWKS_URI="https://id.example.com/jwks",
    )
    config = oidc_from_environment()
    assert config.enabled and config.token_endpoint == "https://id.example.com/token"

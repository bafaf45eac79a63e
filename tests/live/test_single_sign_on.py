"""Single sign-on against a real OpenID provider (tests/oidc_provider, oidc-provider on Node):
a sign-in creates or finds the user by verified e-mail and gives the roles of their groups, and
every refusal (audience, expiry, signature, unverified e-mail, unknown or replayed state) is a
4xx page saying why, with no session left behind."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.test import Client

from records.models import Membership, Project
from tests.support.oidc_provider import RunningProvider, oidc_provider, sign_in_at_provider

CALLBACK = "http://testserver/accounts/oidc/callback/"


@pytest.fixture(scope="module")
def provider(tmp_path_factory) -> RunningProvider:
    with oidc_provider(tmp_path_factory.mktemp("oidc"), [CALLBACK]) as running:
        yield running


@pytest.fixture
def projects(db) -> dict[str, Project]:
    return {name: Project.objects.create(name=name) for name in ("acme", "globex")}


@pytest.fixture
def sso(settings, provider: RunningProvider, projects) -> RunningProvider:
    settings.OIDC = provider.settings()
    return provider


def start(client: Client, next_page: str = "/project/") -> str:
    answer = client.get("/accounts/oidc/start/", {"next": next_page})
    assert answer.status_code == 302, answer.content
    return answer["Location"]


def back_at(client: Client, callback_url: str):
    parts = urlsplit(callback_url)
    return client.get(parts.path, parse_qs(parts.query))


def sign_in(client: Client, login: str):
    return back_at(client, sign_in_at_provider(start(client), login, CALLBACK))


def signed_in_sessions() -> int:
    return sum("_auth_user_id" in s.get_decoded() for s in Session.objects.all())


def roles_of(email: str) -> dict[str, str]:
    memberships = Membership.objects.filter(user__email__iexact=email).select_related("project")
    return {m.project.name: m.role for m in memberships}


def test_a_sign_in_creates_the_user_with_the_roles_their_groups_give(sso):
    client = Client()
    authorize = start(client)
    query = parse_qs(urlsplit(authorize).query)
    assert authorize.startswith(f"{sso.issuer}/auth?")
    assert query["client_id"] == ["decisionboard"] and query["code_challenge_method"] == ["S256"]

    answer = back_at(client, sign_in_at_provider(authorize, "alice", CALLBACK))

    assert answer.status_code == 302 and answer["Location"] == "/project/"
    user = get_user_model().objects.get(email="alice@example.com")
    assert user.username == "alice@example.com" and not user.has_usable_password()
    assert roles_of("alice@example.com") == {"acme": "admin", "globex": "viewer"}
    page = client.get("/project/", {"project": "acme"})
    assert page.status_code == 200
    assert "alice@example.com" in page.content.decode()
    assert signed_in_sessions() == 1


def test_an_existing_user_is_found_by_e_mail_and_their_roles_follow_the_claim(sso, settings):
    alice = get_user_model().objects.create_user("alice", email="Alice@Example.com", password="x")
    Membership.objects.create(user=alice, project=Project.objects.get(name="acme"), role="editor")

    assert sign_in(Client(), "alice").status_code == 302
    assert get_user_model().objects.filter(email__iexact="alice@example.com").count() == 1
    assert roles_of("Alice@Example.com") == {"acme": "admin", "globex": "viewer"}

    # Her groups now give acme's viewer role only and globex nothing: she is acme's last admin,
    # so she stays one; globex, named by the mapping, drops her.
    settings.OIDC = sso.settings(
        roles={"everyone": {"acme": "viewer"}, "none": {"globex": "admin"}}
    )
    assert sign_in(Client(), "alice").status_code == 302
    assert roles_of("Alice@Example.com") == {"acme": "admin"}

    # With another admin in acme, the next sign-in gives her the claim's role.
    other = get_user_model().objects.create_user("olga")
    Membership.objects.create(user=other, project=Project.objects.get(name="acme"), role="admin")
    assert sign_in(Client(), "alice").status_code == 302
    assert roles_of("Alice@Example.com") == {"acme": "viewer"}


REFUSALS = {
    "wrong audience": (
        {"aud": "another-application"},
        "alice",
        401,
        "issued for another application",
    ),
    "expired ID token": ({"exp": -600}, "alice", 401, "The ID token has expired."),
    "bad signature": (
        {"stranger_key": True},
        "alice",
        401,
        "signature does not verify with the provider",
    ),
    "unverified e-mail": (None, "mallory", 403, "mallory@example.com is not verified"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_refused_sign_in_is_a_4xx_saying_why_and_leaves_no_session(sso, case):
    change, login, status, reason = REFUSALS[case]
    if change is not None:
        sso.next_id_token(**change)

    answer = sign_in(Client(), login)

    assert answer.status_code == status, answer.content
    assert reason in answer.content.decode()
    assert Session.objects.count() == 0
    assert not get_user_model().objects.filter(email=f"{login}@example.com").exists()


def test_a_replayed_callback_is_refused(sso):
    client = Client()
    callback = sign_in_at_provider(start(client), "victor", CALLBACK)
    assert back_at(client, callback).status_code == 302
    assert signed_in_sessions() == 1
    sessions = Session.objects.count()

    for replay in (Client(), client):
        answer = back_at(replay, callback)
        assert answer.status_code == 400
        assert "unknown here or was already used" in answer.content.decode()
    # The replay made no session, and the one it was replayed in is signed out.
    assert Session.objects.count() == sessions - 1
    assert signed_in_sessions() == 0


def test_a_state_this_browser_did_not_start_is_refused(sso):
    client = Client()
    callback = sign_in_at_provider(start(client), "victor", CALLBACK)
    forged = callback.replace("state=", "state=forged")

    answer = back_at(client, forged)

    assert answer.status_code == 400
    assert "unknown here or was already used" in answer.content.decode()
    assert Session.objects.count() == 0
    assert not get_user_model().objects.filter(email="victor@example.com").exists()


def test_the_provider_refusing_is_a_4xx_page(sso):
    client = Client()
    start(client)
    state = next(iter(client.session["oidc_states"]))

    answer = client.get(
        "/accounts/oidc/callback/",
        {"error": "access_denied", "error_description": "End-User aborted", "state": state},
    )

    assert answer.status_code == 403
    assert "The provider refused the sign-in: End-User aborted." in answer.content.decode()
    assert Session.objects.count() == 0

"""The login page with single sign-on on and off, password login turned off (the login page and
the Django admin's), and the roles a group claim gives (sso.memberships)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.test import Client

from config.oidc import OidcSettings
from records.models import AuditEntry, Membership, Project
from sso.memberships import groups_in, roles_given, sync_memberships

ON = OidcSettings(
    enabled=True,
    name="Example ID",
    issuer="http://127.0.0.1:9",
    client_id="decisionboard",
    client_secret="s3cret",
    audiences=("decisionboard",),
)
OFF_PASSWORDS = OidcSettings(**{**ON.__dict__, "password_login": False})


@pytest.fixture
def staff(db):
    return get_user_model().objects.create_user(
        "root", password="pw-root", is_staff=True, is_superuser=True
    )


def test_single_sign_on_is_off_by_default(db):
    page = Client().get("/accounts/login/")
    assert page.status_code == 200
    assert "Sign in with" not in page.content.decode()
    assert Client().get("/accounts/oidc/start/").status_code == 404
    assert Client().get("/accounts/oidc/callback/", {"code": "c", "state": "s"}).status_code == 404


def test_the_login_page_offers_the_provider_when_on(db, settings):
    settings.OIDC = ON
    page = Client().get("/accounts/login/", {"next": "/runs/"}).content.decode()
    assert 'href="/accounts/oidc/start/?next=/runs/"' in page
    assert "Sign in with Example ID" in page
    assert 'name="password"' in page


def test_password_login_off_refuses_the_login_form_and_says_why(settings, staff):
    settings.OIDC = OFF_PASSWORDS
    page = Client().get("/accounts/login/").content.decode()
    assert "Sign in with Example ID" in page and 'name="password"' not in page
    assert "single sign-on is the way in" in page

    answer = Client().post("/accounts/login/", {"username": "root", "password": "pw-root"})

    assert answer.status_code == 403
    assert "Password login is off here: sign in with Example ID" in answer.content.decode()
    assert Session.objects.count() == 0


def test_password_login_off_refuses_the_admin_login_too(settings, staff):
    settings.OIDC = OFF_PASSWORDS
    client = Client()
    answer = client.post(
        "/admin/login/?next=/admin/", {"username": "root", "password": "pw-root", "next": "/admin/"}
    )
    assert answer.status_code == 200
    assert "Password login is off here" in answer.content.decode()
    assert Session.objects.count() == 0
    assert client.get("/admin/").status_code == 302


def test_password_login_stays_on_beside_single_sign_on(settings, staff):
    settings.OIDC = ON
    answer = Client().post("/accounts/login/", {"username": "root", "password": "pw-root"})
    assert answer.status_code == 302


def test_the_highest_role_a_group_gives_wins():
    mapping = {"ops": {"acme": "admin"}, "all": {"acme": "viewer", "globex": "editor"}}
    assert roles_given(["all", "ops", "unknown"], mapping) == {"acme": "admin", "globex": "editor"}
    assert groups_in({"groups": "ops"}, "groups") == ["ops"]
    assert groups_in({"groups": ["ops", 3]}, "groups") == ["ops"]
    assert groups_in({}, "groups") == []


def test_the_claim_governs_only_the_projects_the_mapping_names(db):
    acme, globex, initech = (Project.objects.create(name=n) for n in ("acme", "globex", "initech"))
    user = get_user_model().objects.create_user("carol")
    boss = get_user_model().objects.create_user("boss")
    Membership.objects.create(user=boss, project=globex, role="admin")
    Membership.objects.create(user=user, project=globex, role="editor")
    Membership.objects.create(user=user, project=initech, role="admin")
    mapping = {"ops": {"acme": "editor"}, "all": {"globex": "viewer"}}

    sync_memberships(user, ["ops"], mapping)

    held = dict(Membership.objects.filter(user=user).values_list("project__name", "role"))
    # acme given, globex (named, no group of hers) dropped, initech (not named) left alone.
    assert held == {"acme": "editor", "initech": "admin"}
    assert acme.role_of(user) == "editor"
    # Each change is in the audit log of its project, by the single sign-on.
    logged = AuditEntry.objects.order_by("id").values_list(
        "project__name", "action", "object_name", "actor_name", "before", "after"
    )
    assert list(logged) == [
        ("acme", "add", "carol", "single sign-on", None, {"user": "carol", "role": "editor"}),
        ("globex", "remove", "carol", "single sign-on", {"user": "carol", "role": "editor"}, None),
    ]

"""Members invited by e-mail on the Project page: the mail's link, followed by a logged-in
account, by someone who logs in first or by someone who makes an account there; a link that
expired, was revoked or replaced, was used, was tampered with or reached another account
answers a 4xx page and makes nothing. Admins change roles and remove members there, never the
last admin's."""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from config.oidc import OidcSettings
from records import member_changes
from records.member_changes import InvitationUnusable
from records.models import Invitation, Membership
from tests.support.pages import operator

PASSWORD = "a long passphrase for vic"


@pytest.fixture
def ada(alice) -> Client:
    """ada, the admin of acme."""
    return operator("ada", alice)


def invite(client: Client, email: str, role: str = "editor", outbox=None) -> str:
    """Invite `email` on the Project page; the path of the link the mail holds."""
    sent = len(outbox) if outbox is not None else 0
    response = client.post(
        "/project/invitations/", {"project": "acme", "email": email, "role": role}, follow=True
    )
    assert response.status_code == 200
    assert f"Invited {email.lower()} as" in response.content.decode()
    if outbox is None:
        return ""
    assert len(outbox) == sent + 1
    mail = outbox[-1]
    assert mail.to == [email.lower()]
    assert "acme" in mail.subject
    link = re.search(r"https?://\S+/invitations/\S+/", mail.body).group(0)
    return urlsplit(link).path


def account(username: str, email: str) -> Client:
    get_user_model().objects.create_user(username, email=email, password=PASSWORD)
    client = Client()
    assert client.login(username=username, password=PASSWORD)
    return client


def members(alice) -> dict[str, str]:
    rows = Membership.objects.filter(project=alice.project).values_list("user__username", "role")
    return dict(rows)


def test_a_logged_in_account_with_the_address_joins_once_with_the_role(alice, ada, mailoutbox):
    link = invite(ada, "Vic@Example.com", "editor", mailoutbox)
    page = ada.get("/project/").content.decode()
    assert 'data-email="vic@example.com"' in page and "No open invitations." not in page
    token = link.rstrip("/").rsplit("/", 1)[1]
    stored = Invitation.objects.get()
    assert stored.token_hash == Invitation.hash_token(token) and token not in stored.token_hash

    vic = account("vic", "VIC@example.COM")
    page = vic.get(link)
    assert page.status_code == 200
    assert "Join acme" in page.content.decode() and "as editor" in page.content.decode()
    assert members(alice) == {"ada": "admin"}  # opening the link changes nothing
    joined = vic.post(link, follow=True)
    assert joined.redirect_chain[-1][0] == "/project/?project=acme"
    assert "You joined acme as editor." in joined.content.decode()
    assert members(alice) == {"ada": "admin", "vic": "editor"}

    again = vic.post(link)
    assert again.status_code == 410
    assert "already been used" in again.content.decode()
    assert vic.get(link).status_code == 410
    assert "No open invitations." in ada.get("/project/").content.decode()


def test_someone_without_an_account_makes_one_and_joins(alice, ada, mailoutbox):
    link = invite(ada, "new@example.com", "viewer", mailoutbox)
    visitor = Client()
    page = visitor.get(link).content.decode()
    assert "Create your account for new@example.com" in page
    answer = visitor.post(
        link, {"username": "newt", "password1": PASSWORD, "password2": PASSWORD}, follow=True
    )
    assert answer.redirect_chain[-1][0] == "/project/?project=acme"
    assert "You joined acme as viewer." in answer.content.decode()
    newt = get_user_model().objects.get(username="newt")
    assert newt.email == "new@example.com" and newt.check_password(PASSWORD)
    assert members(alice) == {"ada": "admin", "newt": "viewer"}
    assert visitor.get("/project/").status_code == 200  # logged in
    assert Client().get(link).status_code == 410


def test_a_password_the_validators_refuse_makes_no_account(alice, ada, mailoutbox):
    link = invite(ada, "new@example.com", "viewer", mailoutbox)
    answer = Client().post(link, {"username": "newt", "password1": "abc", "password2": "abc"})
    assert answer.status_code == 200
    assert "This password is too short" in answer.content.decode()
    assert not get_user_model().objects.filter(username="newt").exists()


def test_someone_with_an_account_logs_in_first_then_joins(alice, ada, mailoutbox):
    get_user_model().objects.create_user("vic", email="vic@example.com", password=PASSWORD)
    link = invite(ada, "vic@example.com", "admin", mailoutbox)
    visitor = Client()
    page = visitor.get(link).content.decode()
    assert f'href="/accounts/login/?next={link}"' in page and "Create your account" not in page
    assert visitor.post(link)["Location"].startswith("/accounts/login/")
    assert not get_user_model().objects.filter(email="vic@example.com").exclude(username="vic")
    logged_in = visitor.post(
        "/accounts/login/", {"username": "vic", "password": PASSWORD, "next": link}
    )
    assert logged_in["Location"] == link
    assert visitor.post(link).status_code == 302
    assert members(alice) == {"ada": "admin", "vic": "admin"}


def test_an_expired_link_answers_410_and_makes_nothing(alice, ada, mailoutbox):
    link = invite(ada, "vic@example.com", "editor", mailoutbox)
    token = link.rstrip("/").rsplit("/", 1)[1]
    invitation = Invitation.objects.get()
    assert invitation.expires_at - timezone.now() > timedelta(days=6, hours=23)
    vic = account("vic", "vic@example.com")
    with pytest.raises(InvitationUnusable, match="expired"):
        member_changes.accept(token, get_user_model().objects.get(username="vic"),
                              now=invitation.expires_at)  # fmt: skip
    Invitation.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    for answer in (vic.get(link), vic.post(link)):
        assert answer.status_code == 410
        assert "This invitation has expired" in answer.content.decode()
    signup = Client().post(link, {"username": "x", "password1": PASSWORD, "password2": PASSWORD})
    assert signup.status_code == 410
    assert not get_user_model().objects.filter(username="x").exists()
    assert members(alice) == {"ada": "admin"}
    assert "(expired)" in ada.get("/project/").content.decode()


def test_the_link_expires_after_the_configured_days(alice, ada, mailoutbox, settings):
    settings.DECISIONBOARD = {**settings.DECISIONBOARD, "INVITATION_DAYS": 2}
    invite(ada, "vic@example.com", "editor", mailoutbox)
    left = Invitation.objects.get().expires_at - timezone.now()
    assert timedelta(days=1, hours=23) < left <= timedelta(days=2)


def test_a_tampered_link_answers_404_and_makes_nothing(alice, ada, mailoutbox):
    link = invite(ada, "vic@example.com", "editor", mailoutbox)
    token = link.rstrip("/").rsplit("/", 1)[1]
    forged = link.replace(token, token[:-1] + ("A" if token[-1] != "A" else "B"))
    vic = account("vic", "vic@example.com")
    for answer in (vic.get(forged), vic.post(forged), Client().get("/invitations/x/")):
        assert answer.status_code == 404
        assert "This invitation link is not valid" in answer.content.decode()
    signup = Client().post(forged, {"username": "x", "password1": PASSWORD, "password2": PASSWORD})
    assert signup.status_code == 404
    assert not get_user_model().objects.filter(username="x").exists()
    assert members(alice) == {"ada": "admin"}
    assert vic.post(link).status_code == 302  # the real link still works


def test_another_account_is_refused_and_nothing_is_made(alice, ada, mailoutbox):
    link = invite(ada, "vic@example.com", "editor", mailoutbox)
    eve = account("eve", "eve@example.com")
    for answer in (eve.get(link), eve.post(link)):
        assert answer.status_code == 403
        text = answer.content.decode()
        assert "This invitation is for vic@example.com" in text and "log out" in text
    no_address = account("noaddr", "")
    assert no_address.post(link).status_code == 403
    assert members(alice) == {"ada": "admin"}
    assert Invitation.objects.get().accepted_at is None


def test_a_revoked_link_answers_410(alice, ada, mailoutbox):
    link = invite(ada, "vic@example.com", "editor", mailoutbox)
    invitation = Invitation.objects.get()
    page = ada.post(f"/project/invitations/{invitation.pk}/revoke/", follow=True)
    assert "Revoked the invitation of vic@example.com." in page.content.decode()
    assert "No open invitations." in page.content.decode()
    vic = account("vic", "vic@example.com")
    answer = vic.post(link)
    assert answer.status_code == 410 and "withdrawn" in answer.content.decode()
    assert members(alice) == {"ada": "admin"}


def test_inviting_an_address_again_replaces_its_invitation(alice, ada, mailoutbox):
    first = invite(ada, "vic@example.com", "viewer", mailoutbox)
    second = invite(ada, "VIC@example.com", "admin", mailoutbox)
    assert first != second
    page = ada.get("/project/").content.decode()
    assert page.count('data-email="vic@example.com"') == 1
    vic = account("vic", "vic@example.com")
    assert vic.post(first).status_code == 410
    assert vic.post(second).status_code == 302
    assert members(alice) == {"ada": "admin", "vic": "admin"}


def test_inviting_a_member_is_refused(alice, ada, mailoutbox):
    operator("eve", alice, role="viewer")
    get_user_model().objects.filter(username="eve").update(email="Eve@example.com")
    page = ada.post(
        "/project/invitations/",
        {"project": "acme", "email": "eve@EXAMPLE.com", "role": "admin"},
        follow=True,
    ).content.decode()
    assert "eve@example.com is already a member of acme." in page
    assert mailoutbox == [] and not Invitation.objects.exists()


def test_a_member_by_then_is_told_so_and_keeps_their_role(alice, ada, mailoutbox):
    link = invite(ada, "vic@example.com", "admin", mailoutbox)
    vic = account("vic", "vic@example.com")
    ada.post("/project/members/", {"project": "acme", "username": "vic", "role": "viewer"})
    answer = vic.post(link)
    assert answer.status_code == 409 and "already a member of acme" in answer.content.decode()
    assert members(alice) == {"ada": "admin", "vic": "viewer"}


def test_a_mail_that_cannot_be_sent_leaves_no_invitation(alice, ada, settings):
    # A real SMTP backend, to a port where nothing listens.
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", 9
    page = ada.post(
        "/project/invitations/",
        {"project": "acme", "email": "vic@example.com", "role": "viewer"},
        follow=True,
    ).content.decode()
    assert "The invitation could not be mailed, so none was made" in page
    assert not Invitation.objects.exists()


def test_an_admin_changes_roles_but_never_demotes_or_removes_the_last_admin(alice, ada):
    operator("eve", alice, role="viewer")
    page = ada.get("/project/").content.decode()
    assert ">Change role</button>" in page and ">Leave</button>" in page
    ada.post("/project/members/", {"project": "acme", "username": "eve", "role": "editor"})
    assert members(alice) == {"ada": "admin", "eve": "editor"}
    demote = ada.post(
        "/project/members/", {"project": "acme", "username": "ada", "role": "viewer"}, follow=True
    )
    assert "ada is the last admin of acme. Make another member an admin first." in (
        demote.content.decode()
    )
    leave = ada.post(
        "/project/members/", {"project": "acme", "username": "ada", "role": ""}, follow=True
    )
    assert "ada is the last admin of acme." in leave.content.decode()
    assert members(alice) == {"ada": "admin", "eve": "editor"}
    ada.post("/project/members/", {"project": "acme", "username": "eve", "role": "admin"})
    ada.post("/project/members/", {"project": "acme", "username": "eve", "role": ""})
    assert members(alice) == {"ada": "admin"}


def test_only_an_admin_of_the_project_revokes_its_invitations(alice, bob, ada, mailoutbox):
    invite(ada, "vic@example.com", "editor", mailoutbox)
    invitation = Invitation.objects.get()
    outsider = operator("bo", bob)
    assert outsider.post(f"/project/invitations/{invitation.pk}/revoke/").status_code == 404
    editor = operator("eve", alice, role="editor")
    assert editor.post(f"/project/invitations/{invitation.pk}/revoke/").status_code == 403
    assert 'data-email="vic@example.com"' not in editor.get("/project/").content.decode()
    invitation.refresh_from_db()
    assert invitation.revoked_at is None


def test_with_password_login_off_the_invitee_signs_in_instead_of_making_a_password(
    alice, ada, mailoutbox, settings
):
    settings.OIDC = OidcSettings(
        enabled=True,
        name="Example ID",
        issuer="http://127.0.0.1:9",
        client_id="decisionboard",
        client_secret="s3cret",
        audiences=("decisionboard",),
        password_login=False,
    )
    link = invite(ada, "new@example.com", "viewer", mailoutbox)
    visitor = Client()
    page = visitor.get(link).content.decode()
    assert "Sign in with the account that has this address" in page
    assert "Create your account" not in page
    answer = visitor.post(link, {"username": "newt", "password1": PASSWORD, "password2": PASSWORD})
    assert answer["Location"].startswith("/accounts/login/")
    assert not get_user_model().objects.filter(username="newt").exists()
    assert members(alice) == {"ada": "admin"}

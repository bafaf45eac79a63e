"""An admin invites by e-mail on the Project page, and the invitee, in a browser of their own,
follows the mail's link, makes an account and joins.

Chromium (Debian's, tests/browser/conftest.py) against pytest-django's live server, which runs
in this process: the mail is read from Django's test outbox, as the server sent it.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Browser, Page, expect

from records.models import Membership, Project
from tests.browser.conftest import Console
from tests.support.browser import PASSWORD, log_in

pytestmark = pytest.mark.usefixtures("transactional_db")


def test_an_invitee_follows_the_mailed_link_makes_an_account_and_joins(
    page: Page, browser: Browser, live_server, console: Console, mailoutbox, settings
):
    settings.SITE_URL = live_server.url
    acme = Project.objects.create(name="acme")
    carol = get_user_model().objects.create_user("carol", password=PASSWORD)
    Membership.objects.create(user=carol, project=acme, role="admin")
    log_in(page, {"url": live_server.url}, console)

    page.goto(live_server.url + "/project/")
    page.fill("#invite-email", "Dan@Example.com")
    page.select_option("#invite-role", "editor")
    page.click("form.invite-form button[type=submit]")
    expect(page.locator("ul.messages")).to_contain_text("Invited dan@example.com as an editor")
    expect(page.locator('tr.invitation-row[data-email="dan@example.com"]')).to_be_visible()
    assert len(mailoutbox) == 1 and mailoutbox[0].to == ["dan@example.com"]
    link = re.search(r"http://\S+/invitations/\S+/", mailoutbox[0].body).group(0)
    assert link.startswith(live_server.url)

    invitee = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        theirs = invitee.new_page()
        their_console = Console(theirs)
        theirs.goto(link)
        expect(theirs.locator("h1")).to_have_text("Join acme")
        expect(theirs.locator("body")).to_contain_text("Create your account for dan@example.com")
        theirs.fill("#id_username", "dan")
        theirs.fill("#id_password1", PASSWORD)
        theirs.fill("#id_password2", PASSWORD)
        theirs.click("form.account-form button[type=submit]")
        expect(theirs).to_have_url(re.compile(r"/project/\?project=acme$"))
        expect(theirs.locator("ul.messages")).to_contain_text("You joined acme as editor.")
        expect(theirs.locator('tr.member-row[data-member="dan"]')).to_contain_text("editor")
        # The link worked once.
        theirs.goto(link)
        expect(theirs.locator("h1")).to_have_text("This invitation cannot be used")
        expect(theirs.locator("body")).to_contain_text("already been used")
        assert [e for e in their_console.take() if "410" not in e] == []
    finally:
        invitee.close()

    page.reload()
    expect(page.locator('tr.member-row[data-member="dan"]')).to_contain_text("editor")
    expect(page.locator("table.invitations")).to_contain_text("No open invitations.")
    assert console.take() == []

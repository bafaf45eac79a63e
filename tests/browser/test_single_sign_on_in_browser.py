"""Single sign-on in a real browser against a real OpenID provider (tests/oidc_provider): the
login page's button, the provider's own login and consent pages, and back on the page asked for,
signed in, with the role the group claim gives."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, expect

from records.models import Project
from tests.browser.conftest import Console
from tests.support.oidc_provider import oidc_provider

pytestmark = pytest.mark.usefixtures("transactional_db")


@pytest.fixture(scope="module")
def provider(live_server, tmp_path_factory):
    callback = f"{live_server.url}/accounts/oidc/callback/"
    with oidc_provider(tmp_path_factory.mktemp("oidc"), [callback]) as running:
        yield running


def test_signing_in_at_the_provider_lands_on_the_project_with_the_claimed_role(
    page: Page, console: Console, live_server, provider, settings
):
    settings.OIDC = provider.settings()
    Project.objects.create(name="acme")
    # The provider's development pages ask for a web font; nothing here may leave the machine.
    page.route(re.compile(r"^https://fonts\."), lambda route: route.abort())

    page.goto(f"{live_server.url}/project/?project=acme")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next="))
    page.get_by_role("link", name="Sign in with Test Provider").click()

    expect(page).to_have_url(re.compile(rf"^{re.escape(provider.issuer)}/interaction/"))
    page.fill("input[name=login]", "alice")
    page.fill("input[name=password]", "any password")
    page.click("button[type=submit]")
    page.get_by_role("button", name="Continue").click()

    expect(page).to_have_url(f"{live_server.url}/project/?project=acme")
    console.take()  # the provider's pages (the font refused) are not Decisionboard's
    member = page.locator('tr[data-member="alice@example.com"]')
    expect(member).to_contain_text("admin")
    expect(page.locator("header .who")).to_have_text("alice@example.com")
    user = get_user_model().objects.get(email="alice@example.com")
    assert Project.objects.get(name="acme").role_of(user) == "admin"

    page.reload()
    expect(page.locator('tr[data-member="alice@example.com"]')).to_contain_text("admin")
    assert console.take() == []

"""Playwright driving Debian's Chromium (/usr/bin/chromium) against pytest-django's live server.

No browser is ever downloaded: the launch names the system Chromium. Without it the
tests skip, and under REQUIRE_SERVICES=1 (CI, which installs it in .ci/run) they fail.

Playwright's sync API keeps an asyncio loop running on the main thread while it is started, and
Django refuses ORM calls from a thread with a running loop. So Playwright lives for this package
only (the fixtures below narrow pytest-playwright's session scope), and Django's check is lifted
for exactly that time: the tests' own setup code runs between browser calls, never inside one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserType, Page, Playwright, expect, sync_playwright
from pytest_django.live_server_helper import LiveServer

from tests.support.services import need_service

# The first page of a run loads the 4.8 MB plotly.js cold; on a busy 2-core CI machine that
# can take longer than Playwright's 5 s default before a chart is drawn.
expect.set_options(timeout=30_000)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# The README's screenshots are refreshed by `bin/screenshots`, which sets this; an ordinary test
# run takes none, so that it never changes the work tree.
SCREENSHOTS = os.environ.get("DECISIONBOARD_SCREENSHOTS", "")


@pytest.fixture(scope="session")
def live_server(request) -> Iterator[LiveServer]:
    """pytest-django's live server, with static files served as the product serves them: by
    WhiteNoise, hashed names from the collected files (dashboard.http.staticfiles). Django's own
    static handler would look them up through the finders, which know no hashed name."""
    server = LiveServer("localhost", start=False)
    server.thread.static_handler = lambda application: application
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict) -> dict:
    need_service(os.access(CHROMIUM, os.X_OK), f"Chromium at {CHROMIUM} (apt-get install chromium)")
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


@pytest.fixture(scope="package")
def playwright() -> Iterator[Playwright]:
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    pw = sync_playwright().start()
    try:
        yield pw
    finally:
        pw.stop()
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture(scope="package")
def browser_type(playwright: Playwright, browser_name: str) -> BrowserType:
    return getattr(playwright, browser_name)


@pytest.fixture(scope="package")
def launch_browser(
    browser_type_launch_args: dict, browser_type: BrowserType
) -> Callable[..., Browser]:
    def launch(**kwargs) -> Browser:
        return browser_type.launch(**{**browser_type_launch_args, **kwargs})

    return launch


@pytest.fixture(scope="package")
def browser(launch_browser: Callable[..., Browser]) -> Iterator[Browser]:
    browser = launch_browser()
    yield browser
    browser.close()


@pytest.fixture(scope="package")
def browser_context_args() -> dict:
    # Replaces pytest-playwright's (session-scoped, it needs `playwright`); these tests use none
    # of the --device, --base-url or --video options it reads.
    return {"viewport": {"width": 1400, "height": 900}}


class Console:
    """Errors the page reported: console errors (CSP violations included) and uncaught ones."""

    def __init__(self, page: Page) -> None:
        self.errors: list[str] = []
        page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))

    def take(self) -> list[str]:
        errors, self.errors = self.errors, []
        return errors


@pytest.fixture
def console(page: Page) -> Console:
    return Console(page)


def screenshot(page: Page, name: str, *, full_page: bool = True) -> None:
    """Save the page as docs/screenshots/<name>.png, when bin/screenshots asks for it."""
    if not SCREENSHOTS:
        return
    folder = Path(SCREENSHOTS)
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=full_page)

"""A real OpenID Connect provider for the single sign-on tests: tests/oidc_provider/server.js
(panva's oidc-provider on Node) started as a process on a free port, and a user agent that signs
in at its own login and consent pages."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from html import unescape
from pathlib import Path
from urllib.parse import urljoin

import requests

from config.oidc import OidcSettings
from tests.support import node_packages
from tests.support.live import STARTUP_SECONDS, wait_until
from tests.support.services import need_service
from workers import processes

FOLDER = node_packages.ROOT / "tests" / "oidc_provider"
CLIENT_ID = "decisionboard"
CLIENT_SECRET = "decisionboard-client-secret"
# The provider's users: a login (any password) and the claims the provider gives for it.
ACCOUNTS = {
    "alice": {
        "email": "alice@example.com",
        "email_verified": True,
        "name": "Alice Admin",
        "groups": ["acme-admins", "everyone"],
    },
    "victor": {
        "email": "victor@example.com",
        "email_verified": True,
        "groups": ["everyone"],
    },
    "mallory": {
        "email": "mallory@example.com",
        "email_verified": False,
        "groups": ["acme-admins"],
    },
}
# The groups the tests map to roles (DECISIONBOARD_OIDC_ROLES).
ROLES = {"acme-admins": {"acme": "admin"}, "everyone": {"acme": "viewer", "globex": "viewer"}}


@dataclass(frozen=True)
class RunningProvider:
    issuer: str

    def settings(self, **changes) -> OidcSettings:
        """Decisionboard's configuration for this provider, as the environment would make it
        (config.oidc): its endpoints found by discovery."""
        base = OidcSettings(
            enabled=True,
            name="Test Provider",
            issuer=self.issuer,
            client_id=CLIENT_ID,
            client_secret=CLIENT_SECRET,
            scopes="openid email profile groups",
            audiences=(CLIENT_ID,),
            roles=ROLES,
        )
        return OidcSettings(**{**base.__dict__, **changes})

    def next_id_token(self, **change) -> None:
        """Make the provider's next token answer carry an ID token with `change` (aud, exp in
        seconds from now, stranger_key) made to it (tests/oidc_provider/server.js)."""
        answer = requests.post(f"{self.issuer}/test/next-id-token", json=change, timeout=10)
        assert answer.status_code == 204, answer.text


@contextmanager
def oidc_provider(tmp_path: Path, redirect_uris: list[str]) -> Iterator[RunningProvider]:
    need_service(shutil.which("node") is not None, "Node.js (node 20 or later)")
    node_packages.install(FOLDER)
    port = processes.free_port()
    env = {
        "PATH": os.environ["PATH"],
        "OIDC_PORT": str(port),
        "OIDC_CLIENT_ID": CLIENT_ID,
        "OIDC_CLIENT_SECRET": CLIENT_SECRET,
        "OIDC_REDIRECT_URIS": ",".join(redirect_uris),
        "OIDC_ACCOUNTS": json.dumps(ACCOUNTS),
    }
    command = ["node", str(FOLDER / "server.js")]
    with processes.running(command, env=env, log=tmp_path / f"oidc-provider-{port}.log"):
        issuer = f"http://127.0.0.1:{port}"
        wait_until(
            lambda: requests.get(f"{issuer}/.well-known/openid-configuration", timeout=5).ok,
            STARTUP_SECONDS,
            "the OpenID provider",
        )
        yield RunningProvider(issuer)


FORM_ACTION = re.compile(r'<form[^>]*action="([^"]+)"')


def sign_in_at_provider(authorize_url: str, login: str, redirect_uri: str) -> str:
    """Sign in as `login` at the provider's own pages and consent, as a browser would; returns
    the URL the provider sends the browser back to (the callback, with its code and state)."""
    agent = requests.Session()
    url = authorize_url
    for _ in range(20):
        answer = agent.get(url, allow_redirects=False, timeout=10)
        while answer.is_redirect:
            url = urljoin(url, answer.headers["Location"])
            if url.startswith(redirect_uri):
                return url
            answer = agent.get(url, allow_redirects=False, timeout=10)
        action = FORM_ACTION.search(answer.text)
        assert action, f"no form at {url}: {answer.status_code} {answer.text[:500]}"
        target = urljoin(url, unescape(action.group(1)))
        if 'name="login"' in answer.text:
            fields = {"prompt": "login", "login": login, "password": "any"}
        else:
            fields = {"prompt": "consent"}
        answer = agent.post(target, data=fields, allow_redirects=False, timeout=10)
        assert answer.is_redirect, f"{target}: {answer.status_code} {answer.text[:500]}"
        url = urljoin(target, answer.headers["Location"])
        if url.startswith(redirect_uri):
            return url
    raise AssertionError(f"the provider never sent the browser back to {redirect_uri}")

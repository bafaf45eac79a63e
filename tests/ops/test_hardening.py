"""Defences beside the hostile-input tests: wrapped loopback addresses in webhook URLs, and
the HTTPS setting for deployments behind TLS."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from alerts.safety import UnsafeURL, check_webhook_url, is_internal


@pytest.mark.parametrize(
    "url",
    [
        "http://[2002:7f00:1::]/hook",  # 6to4 wrapping 127.0.0.1
        "http://[2002:a9fe:a9fe::]/latest/meta-data",  # 6to4 wrapping 169.254.169.254
        "http://[64:ff9b::7f00:1]/hook",  # NAT64 wrapping 127.0.0.1
        "http://[64:ff9b:1::a00:1]/hook",  # local-use NAT64 wrapping 10.0.0.1
        "http://[::ffff:0:7f00:1]/hook",  # IPv4-mapped, written out
        "http://[::ffff:10.0.0.1]/hook",
        "http://[::127.0.0.1]/hook",  # IPv4-compatible (deprecated)
        "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/hook",  # Teredo, client 127.0.0.1
    ],
)
def test_it_refuses_ipv6_addresses_that_wrap_an_internal_ipv4_address(url):
    with pytest.raises(UnsafeURL, match="loopback, private or link-local"):
        check_webhook_url(url)


def test_it_still_accepts_public_addresses_and_6to4_of_a_public_one():
    assert not is_internal("93.184.215.14")
    assert not is_internal("2606:2800:220:1:248:1893:25c8:1946")
    assert not is_internal("2002:5db8:d70e::")  # 6to4 of 93.184.215.14


def _django(code: str, tmp_path, **env) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DEBUG")}
    full.update(
        DECISIONBOARD_VAR_DIR=str(tmp_path),
        DJANGO_SETTINGS_MODULE="config.settings",
        ALLOWED_HOSTS="testserver",
    )
    full.update(env)
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()\n" + code],
        env=full,
        capture_output=True,
        text=True,
    )


def _check_deploy(tmp_path, **env) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DEBUG")}
    full.update(DECISIONBOARD_VAR_DIR=str(tmp_path), **env)
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        env=full,
        capture_output=True,
        text=True,
    )


def test_check_deploy_is_clean_with_the_https_setting(tmp_path):
    out = _check_deploy(tmp_path, DECISIONBOARD_HTTPS="1")
    assert out.returncode == 0, out.stderr
    assert "no issues" in out.stdout


def test_check_deploy_names_what_is_missing_without_it(tmp_path):
    out = _check_deploy(tmp_path)
    assert out.returncode != 0
    assert "SESSION_COOKIE_SECURE" in out.stderr and "SECURE_HSTS_SECONDS" in out.stderr


_REQUESTS = """
from django.test import Client
client = Client()
secure = client.get("/accounts/login/", headers={"X-Forwarded-Proto": "https"})
plain = client.get("/accounts/login/")
print(secure.status_code, secure.headers.get("Strict-Transport-Security"))
print("csrftoken-secure", secure.cookies["csrftoken"]["secure"])
print(plain.status_code, plain.headers.get("Location"))
"""


def test_behind_an_https_proxy_it_sends_hsts_secure_cookies_and_redirects_plain_http(tmp_path):
    out = _django(_REQUESTS, tmp_path, DECISIONBOARD_HTTPS="1")
    assert out.returncode == 0, out.stderr
    secure, cookie, plain = out.stdout.splitlines()
    assert secure == "200 max-age=31536000; includeSubDomains; preload"
    assert cookie == "csrftoken-secure True"
    assert plain == "301 https://testserver/accounts/login/"


def test_without_the_setting_it_serves_plain_http(tmp_path):
    out = _django(_REQUESTS, tmp_path)
    assert out.returncode == 0, out.stderr
    secure, cookie, plain = out.stdout.splitlines()
    assert secure == "200 None"
    assert cookie == "csrftoken-secure "
    assert plain.startswith("200")

"""Production readiness for `manage.py doctor`: the embedded defaults `bin/start` chooses on
purpose (SQLite, the generated SECRET_KEY, local ALLOWED_HOSTS, no HTTPS), judged by a pure
function over the settings' values, and Django's own deployment checks. Advice on a local
install; failed by `doctor --deploy`, the checklist before going live."""

from __future__ import annotations

from collections.abc import Iterable

from django.conf import settings
from django.core import checks

from ops.findings import Finding

LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})
DEFAULT_SITE_URL = "http://127.0.0.1:8000"
MIN_SECRET_LENGTH = 50  # Django's own bar (security.W009)
MIN_TOKEN_LENGTH = 24
HTTPS_FIX = (
    "serve over HTTPS behind the proxy (deploy/nginx/decisionboard.conf) and set "
    "DECISIONBOARD_HTTPS=1: secure cookies, HSTS, and the proxy's X-Forwarded-Proto trusted"
)
# Deployment checks that the configuration section already reports in its own words.
_COVERED_CHECKS = frozenset({"security.W009", "security.W018", "security.W020"})
# Django deployment checks that the HTTPS setting answers.
_HTTPS_CHECKS = frozenset(
    {
        "security.W004",
        "security.W005",
        "security.W008",
        "security.W012",
        "security.W016",
        "security.W021",
    }
)


def configuration(
    *,
    secret_key: str,
    generated_secret_key: str | None,
    debug: bool,
    allowed_hosts: Iterable[str],
    database_engine: str,
    redis_url: str | None,
    site_url: str,
    metrics_token: str,
) -> list[Finding]:
    """Judge the settings' values (plain data: a test passes any it likes). What is wrong only
    for a production installation is a readiness item."""
    section = "configuration"
    found: list[Finding] = []

    def advice(message: str, fix: str) -> Finding:
        return Finding(section, False, message, fix, readiness=True)

    new_key = "python -c 'import secrets; print(secrets.token_urlsafe(50))'"
    if generated_secret_key is not None and secret_key == generated_secret_key:
        found.append(
            advice(
                "SECRET_KEY is not set: sessions are signed with the key generated into "
                "var/secret_key on this machine",
                f"set SECRET_KEY in the environment, the same on every web machine ({new_key})",
            )
        )
    elif len(secret_key) < MIN_SECRET_LENGTH or len(set(secret_key)) < 5:
        found.append(
            advice(
                "SECRET_KEY is short or repetitive",
                f"set SECRET_KEY to a long random value ({new_key})",
            )
        )
    else:
        found.append(Finding(section, True, "SECRET_KEY is set"))
    if debug:
        found.append(
            advice(
                "DEBUG is on: error pages show settings and source code to anyone",
                "set DEBUG=0",
            )
        )
    else:
        found.append(Finding(section, True, "DEBUG is off"))
    hosts = [h for h in allowed_hosts if h]
    if "*" in hosts:
        found.append(
            advice(
                "ALLOWED_HOSTS accepts any Host header",
                "set ALLOWED_HOSTS to the names the site is served as, e.g. "
                "ALLOWED_HOSTS=decisions.example.com",
            )
        )
    elif not set(hosts) - LOCAL_HOSTS:
        found.append(
            advice(
                "ALLOWED_HOSTS names only this machine: requests for the public name get 400",
                "set ALLOWED_HOSTS to the names the site is served as, e.g. "
                "ALLOWED_HOSTS=decisions.example.com",
            )
        )
    else:
        found.append(Finding(section, True, f"ALLOWED_HOSTS: {', '.join(hosts)}"))
    if database_engine.endswith("sqlite3"):
        found.append(
            advice(
                "the database is SQLite (the embedded default): one machine, one writer at a time",
                "set DATABASE_URL=postgres://USER@HOST:5432/decisionboard and run "
                "manage.py migrate",
            )
        )
    elif database_engine.endswith("postgresql"):
        found.append(Finding(section, True, "the database is PostgreSQL"))
    else:
        found.append(
            Finding(
                section,
                False,
                f"the database engine {database_engine} is not supported",
                "set DATABASE_URL=postgres://…",
            )
        )
    if redis_url:
        found.append(Finding(section, True, "the broker is Redis (REDIS_URL)"))
    else:
        found.append(
            Finding(
                section,
                False,
                "REDIS_URL is not set: the filesystem broker under var/broker reaches only this "
                "machine's workers, and rate limits are counted per process",
                "set REDIS_URL=redis://HOST:6379/0 to run workers or web on more machines",
                note=True,
            )
        )
    if site_url.rstrip("/") == DEFAULT_SITE_URL:
        found.append(
            Finding(
                section,
                False,
                f"SITE_URL is the default ({DEFAULT_SITE_URL}): alert notifications link there",
                "set SITE_URL=https://decisions.example.com",
                note=True,
            )
        )
    if not metrics_token:
        found.append(
            Finding(
                section,
                False,
                "/metrics is off",
                "set DECISIONBOARD_METRICS_TOKEN to a long random value and give it to Prometheus "
                "(docs/operations.md)",
                note=True,
            )
        )
    elif len(metrics_token) < MIN_TOKEN_LENGTH:
        found.append(
            advice(
                f"DECISIONBOARD_METRICS_TOKEN is shorter than {MIN_TOKEN_LENGTH} characters",
                f"set a longer one ({new_key})",
            )
        )
    else:
        found.append(Finding(section, True, "/metrics is on, behind a token"))
    return found


def security() -> list[Finding]:
    """Django's deployment checks (what `manage.py check --deploy` reports), not silenced:
    readiness items, every one."""
    messages = checks.run_checks(include_deployment_checks=True, tags=[checks.Tags.security])
    found = []
    https = []
    for message in messages:
        if message.is_silenced() or message.id in _COVERED_CHECKS:
            continue
        if message.id in _HTTPS_CHECKS:
            https.append(message.id)
        else:
            found.append(
                Finding(
                    "security",
                    False,
                    f"{message.id}: {message.msg}",
                    message.hint or "",
                    readiness=True,
                )
            )
    if https:
        found.insert(
            0,
            Finding(
                "security",
                False,
                f"not set up for HTTPS ({', '.join(sorted(https))}): session and CSRF cookies may "
                "travel over plain HTTP, and browsers are not told to insist on HTTPS",
                HTTPS_FIX,
                readiness=True,
            ),
        )
    if not found:
        found.append(Finding("security", True, "manage.py check --deploy finds nothing"))
    return found


def generated_secret_key() -> str | None:
    path = settings.VAR_DIR / "secret_key"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return None

"""Data a whole test module reads, made once for the module instead of once for each test.

`module_transaction` opens a transaction around the module's tests: what the module's fixture
makes inside it is seen by every test of the module, each test's own `db` transaction is a
savepoint inside it (a test's changes are rolled back before the next test), and the whole is
rolled back after the module's last test, so that nothing is left for another module.

Only for modules whose tests all use `db` (never `transactional_db`, which would flush the
data under the open transaction).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.test import override_settings


def quiet(decisionboard: dict) -> dict:
    """The product's settings as every test has them (tests/conftest.py): ingest enqueues
    nothing, and API keys and price overrides are looked up on every request."""
    return {
        **decisionboard,
        "NUDGE_WORKERS": False,
        "API_KEY_CACHE_SECONDS": 0,
        "PRICE_OVERRIDE_CACHE_SECONDS": 0,
    }


def quick_hashers(hashers: list[str]) -> list[str]:
    """Passwords hashed at one iteration (tests/support/hashers.py), every other hash read."""
    return ["tests.support.hashers.OneRoundPBKDF2PasswordHasher", *hashers]


@contextmanager
def module_transaction(django_db_blocker, var_dir: Path) -> Iterator[None]:
    """The module's transaction, with the settings the tests' autouse fixtures give each test,
    which do not apply yet while a module fixture runs."""
    with (
        django_db_blocker.unblock(),
        override_settings(
            DECISIONBOARD=quiet(settings.DECISIONBOARD),
            PASSWORD_HASHERS=quick_hashers(settings.PASSWORD_HASHERS),
            VAR_DIR=var_dir,
        ),
        transaction.atomic(),
    ):
        yield
        transaction.set_rollback(True)

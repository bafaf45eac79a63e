"""A password hasher for the tests: PBKDF2-SHA256 at one iteration.

The default's million iterations cost most of a second a password, and most page tests create a
logged-in member. A hash this one makes is an ordinary `pbkdf2_sha256` hash that stores its own
iteration count, so a live server on the product's settings verifies it (and upgrades it at that
login, as Django does for any hash below its count).
"""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class OneRoundPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1

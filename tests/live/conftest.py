"""Fixtures of the tests that run the product as processes."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.support.pages import operator


@pytest.fixture
def alice_pages(alice) -> Client:
    """alice logged in to the pages, an admin of acme."""
    return operator("alice", alice)

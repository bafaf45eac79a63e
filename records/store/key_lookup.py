"""An API key looked up on the primary, its use marked (ApiKey.find_live): in the lookup's own
statement where the database can update inside a query, after the read elsewhere."""

from __future__ import annotations

from django.db import DEFAULT_DB_ALIAS, connections

from records.models import ApiKey
from records.store.backends import backend


def find_live_key(key_hash: str, now=None) -> ApiKey | None:
    """The unrevoked key with this hash, its project loaded, its use marked."""
    one_statement = backend(connections[DEFAULT_DB_ALIAS]).features.data_modifying_ctes
    return ApiKey.find_live(key_hash, now, in_one_statement=one_statement)

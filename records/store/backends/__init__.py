"""The database behind one interface per concern (store_interface), with a PostgreSQL and a
SQLite implementation: `backend()` is the one of the default connection, `backend(conn)` of
another. The only place outside migrations that looks at a connection's vendor."""

from __future__ import annotations

from django.db import connection as default_connection

from records.store.backends.postgresql_store import PostgresqlStore
from records.store.backends.sqlite_store import SqliteStore
from records.store.backends.store_interface import Features, StoreBackend

BACKENDS: dict[str, StoreBackend] = {"postgresql": PostgresqlStore(), "sqlite": SqliteStore()}

__all__ = ["BACKENDS", "Features", "StoreBackend", "backend"]


def backend(conn=None) -> StoreBackend:
    """The store backend of `conn` (a Django connection; the default one when None)."""
    return BACKENDS[(conn or default_connection).vendor]

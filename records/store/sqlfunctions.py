"""The database's own functions and connection set-up that the store relies on, as signal
handlers over the store backend (records.store.backends).

json_add(a, b): two flat JSON objects of counts added key by key, inside the database. Rollup
sketches and run kind counts are such objects; merging them in the UPSERT means a catch-up pass
never reads the rows it adds to. PostgreSQL gets the function from migration 0004; SQLite
connections get the Python version (records.store.backends.sqlite_store.json_add) registered
when they open. Freshness's two reads of the records table are PL/pgSQL functions of migration
0022 on PostgreSQL (records.metrics.freshness says why).
"""

from __future__ import annotations

from records.store.backends import backend


def register_functions(sender, connection, **kwargs) -> None:
    """connection_created: the functions the database lacks."""
    backend(connection).register_functions(connection)


def set_role_defaults(using: str = "default", **kwargs) -> None:
    """post_migrate: behind a transaction pooler (DATABASE_POOLER=transaction) no startup options
    reach the server (PgBouncer refuses them), so the session settings config.settings otherwise
    sends with each connection (jit=off) become the role's defaults, for the sessions the pooler
    opens from now on. A role may always set its own."""
    from django.conf import settings
    from django.db import connections

    conn = connections[using]
    backend(conn).set_role_defaults(conn, settings.DATABASE_POOLER)

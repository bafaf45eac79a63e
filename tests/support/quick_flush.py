"""Emptying the PostgreSQL test database after a transactional test, without TRUNCATE of all.

Django ends every transactional test with `flush`: one TRUNCATE of every model's table, which
on this schema is some 600 relations (each day's partition of the records table brings its
indexes and TOAST table), each given a new file, then `post_migrate` writing the content types
and permissions back. Most tests leave rows in a handful of tables. This flush finds them,
deletes the rows of the small ones and truncates the large ones, and leaves the content types
and permissions that migrate wrote, which no test changes. What it leaves is what `flush` leaves:
every other table empty, sequences where they were.
"""

from __future__ import annotations

from django.db import connections, transaction
from django.test import TransactionTestCase

# Rows beyond which a table is truncated: deleting them would leave that many dead rows for the
# next tests to step over (autovacuum is off on the test server).
TRUNCATE_FROM = 5_000
KEPT = ("django_content_type", "auth_permission")


def empty_tables(alias: str, *, truncate_from: int = TRUNCATE_FROM) -> None:
    """Empty every model table of `alias` (partitions included) but the kept ones: delete the rows
    of a table with fewer than `truncate_from`, truncate the others no foreign key points at."""
    connection = connections[alias]
    names = [
        name
        for name in connection.introspection.django_table_names(only_existing=True)
        if name not in KEPT
    ]
    with transaction.atomic(using=alias), connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT coalesce(tree.relid, root.oid)::regclass::text,
                   EXISTS (SELECT 1 FROM pg_constraint
                           WHERE contype = 'f' AND confrelid IN (tree.relid, root.oid))
            FROM unnest(%s::text[]) AS t(name)
            JOIN pg_class AS root ON root.oid = t.name::regclass
            -- a table that is not partitioned has no tree: it is its own leaf
            LEFT JOIN LATERAL pg_partition_tree(root.oid) AS tree ON true
            WHERE tree.relid IS NULL OR tree.isleaf
            """,
            [names],
        )
        leaves = cursor.fetchall()
        counted = " UNION ALL ".join(
            f"SELECT {index}, (SELECT count(*) FROM (SELECT FROM {leaf} LIMIT {truncate_from}) s)"
            for index, (leaf, _) in enumerate(leaves)
        )
        cursor.execute(counted)
        filled = [(leaves[index], rows) for index, rows in cursor.fetchall() if rows]
        if not filled:
            return
        # Django's foreign keys are deferrable: checked at commit, when every table is empty. The
        # records' key trigger need not delete keys one by one: their table is emptied too.
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")
        cursor.execute("SET LOCAL decisionboard.keep_keys = 'on'")
        large = [
            leaf for (leaf, referenced), rows in filled if rows >= truncate_from and not referenced
        ]
        # TRUNCATE first: it refuses a table with trigger events pending, as deletes queue.
        if large:
            cursor.execute(f"TRUNCATE {', '.join(large)}")
        for (leaf, _), _rows in filled:
            if leaf not in large:
                cursor.execute(f"DELETE FROM {leaf}")


def flush_quickly(test: TransactionTestCase, flush_all) -> None:
    """A transactional test's teardown: the quick flush on PostgreSQL, Django's elsewhere."""
    aliases = [
        alias
        for alias in connections
        if alias in test.databases and not connections[alias].settings_dict["TEST"]["MIRROR"]
    ]
    if (
        test.available_apps is not None
        or test.serialized_rollback
        or any(connections[alias].vendor != "postgresql" for alias in aliases)
    ):
        flush_all(test)
        return
    for alias in aliases:
        empty_tables(alias)

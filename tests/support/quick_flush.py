"""Emptying the PostgreSQL test database after a transactional test, without TRUNCATE of all.

Django ends every transactional test with `flush`: one TRUNCATE of every model's table, which
on this schema is some 600 relations (each day's partition of the records table brings its
indexes and TOAST table), each given a new file, then `post_migrate` writing the content types
and permissions back. Most tests leave rows in a handful of tables. This flush finds them and
truncates those, but for the few tables a foreign key points at (projects, users), whose rows it
deletes: truncating one of those would take every table that points at it along. It leaves the
content types and permissions that migrate wrote, which no test changes. What it leaves is what
`flush` leaves: every other table empty, sequences where they were.

Deleting is kept to those few small tables because the test server runs without autovacuum:
the dead rows of a busy table would stay for every later test to step over, and its size (which
the planner reads without statistics) would only grow.
"""

from __future__ import annotations

from django.db import connections, transaction
from django.test import TransactionTestCase

KEPT = ("django_content_type", "auth_permission")


def empty_tables(alias: str) -> None:
    """Empty every model table of `alias` (partitions included) but the kept ones: truncate the
    filled ones no foreign key points at, delete the rows of the others."""
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
        cursor.execute(
            " UNION ALL ".join(
                f"SELECT {index} WHERE EXISTS (SELECT FROM {leaf})"
                for index, (leaf, _) in enumerate(leaves)
            )
        )
        filled = [leaves[index] for (index,) in cursor.fetchall()]
        if not filled:
            return
        # Django's foreign keys are deferrable: checked at commit, when every table is empty. The
        # records' key trigger need not delete keys one by one: their table is emptied too.
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")
        cursor.execute("SET LOCAL decisionboard.keep_keys = 'on'")
        truncated = [leaf for leaf, referenced in filled if not referenced]
        # TRUNCATE first: it refuses a table with trigger events pending, as deletes queue.
        if truncated:
            cursor.execute(f"TRUNCATE {', '.join(truncated)}")
        for leaf, referenced in filled:
            if referenced:
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

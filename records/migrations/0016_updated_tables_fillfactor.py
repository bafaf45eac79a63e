"""Room on each page of the tables the catch-up updates in place, so that an update is HOT.

A rollup row or a streak segment is rewritten on almost every pass. With full pages (the
default fillfactor of 100) each new version goes to another page and every index gets a new
entry for it: the indexes bloat, every checkpoint makes the next write of each of those pages a
full-page image in the WAL, and only a VACUUM takes the entries back. With a third of each page
kept free, the new version stays on its page (a heap-only tuple: no index entry) and the page is
pruned as it is read. Only new pages get the room; a VACUUM FULL or a rebuild gives it to the
old ones. A no-op on SQLite.
"""

from django.db import migrations

TABLES = ("records_rollup", "records_streaksegment")
FILLFACTOR = 70


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for table in TABLES:
            schema_editor.execute(f"ALTER TABLE {table} SET (fillfactor = {FILLFACTOR})")


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for table in TABLES:
            schema_editor.execute(f"ALTER TABLE {table} RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [("records", "0015_record_key_day")]

    operations = [migrations.RunPython(forwards, backwards)]

"""No column statistics on the runs' project, so that a project the last ANALYZE did not see is
not planned as if it had no runs.

Autovacuum may be off, and the catch-up analyses the runs table itself (records.catchup
.housekeeping). When it last did so before a project's first run, the project is missing from
the statistics, which then hold every run as another project's: PostgreSQL takes `project_id =
<the new project>` to match one row, and any index that leads with the project looks as good as
the unique (project, run_id) one. It chose the smallest, the foreign key's index on the project
alone, and filtered every run of the project by run_id, once for each run of every batch stored
(records.store.writer) and for every run page: with 200,000 runs in the project, a batch of 500
runs took over a minute. Without statistics the project's share is the planner's default, and
the unique index wins the probe whatever was analysed when. A no-op on SQLite.
"""

from django.db import migrations


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        # The statistics an earlier ANALYZE kept go too, or the planner would read them for
        # good (an ANALYZE leaves a column without a target alone). Setting the column's own
        # type again drops them as its owner may, where deleting from pg_statistic needs a
        # superuser; the type being the same, neither the table nor its indexes are rewritten.
        schema_editor.execute(
            "ALTER TABLE records_run ALTER COLUMN project_id SET STATISTICS 0, "
            "ALTER COLUMN project_id TYPE bigint"
        )


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE records_run ALTER COLUMN project_id SET STATISTICS -1")


class Migration(migrations.Migration):
    dependencies = [("records", "0039_classification_cause")]

    operations = [migrations.RunPython(forwards, backwards)]

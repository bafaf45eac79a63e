"""A `route.classifier_unroutable` notice is a fallback (records.contract.fallback_causes): flag the ones
stored before, and their runs, as ingest flags them now.

The fallbacks page counted these notices as a cause but listed only runs with a swap or a
fallback flag, so a run moved by one alone was counted and not listed. Records not folded yet
need only their flag (the catch-up copies it to their run); runs already folded get theirs here.
Per project, along index record_notice_code.
"""

from django.db import migrations

CODE = "route.classifier_unroutable"  # its rollup key: no detail field splits it

_RECORDS = """
UPDATE records_record SET is_fallback = TRUE
WHERE project_id = %s AND kind = 'notice' AND rollup_key = %s AND NOT is_fallback
"""
_RUNS = """
UPDATE records_run SET has_fallback = TRUE
WHERE project_id = %s AND NOT has_fallback AND run_id IN (
    SELECT run_id FROM records_record
    WHERE project_id = %s AND kind = 'notice' AND rollup_key = %s
)
"""


def flag_unroutable_notices(apps, schema_editor):
    Project = apps.get_model("records", "Project")
    with schema_editor.connection.cursor() as cursor:
        for project_id in Project.objects.values_list("id", flat=True):
            cursor.execute(_RECORDS, [project_id, CODE])
            cursor.execute(_RUNS, [project_id, project_id, CODE])


class Migration(migrations.Migration):
    dependencies = [
        ("records", "0027_rollup_tool_key"),
    ]

    operations = [
        migrations.RunPython(flag_unroutable_notices, migrations.RunPython.noop),
    ]

"""A role on each membership (viewer, editor, admin). Every membership made before roles could
do everything, so each becomes an admin; a new one is a viewer until given more."""

from __future__ import annotations

from django.db import migrations, models


def existing_members_are_admins(apps, schema_editor) -> None:
    Membership = apps.get_model("records", "Membership")
    Membership.objects.using(schema_editor.connection.alias).update(role="admin")


class Migration(migrations.Migration):
    dependencies = [("records", "0032_record_release")]

    operations = [
        migrations.AddField(
            model_name="membership",
            name="role",
            field=models.CharField(
                choices=[("viewer", "viewer"), ("editor", "editor"), ("admin", "admin")],
                default="viewer",
                max_length=10,
            ),
        ),
        migrations.RunPython(existing_members_are_admins, migrations.RunPython.noop),
    ]

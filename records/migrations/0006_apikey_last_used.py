from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("records", "0005_drop_rollup_read_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="apikey",
            name="last_used_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
    ]

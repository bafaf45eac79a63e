from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("records", "0007_streak_segment_dirty"),
    ]

    operations = [
        migrations.AddField(
            model_name="apikey",
            name="last_used_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
    ]

# Records carry the release the agent ran as (a version, a prompt hash, a git sha). A nullable
# column without a default: on PostgreSQL, adding it to the partitioned records table adds it to
# every day partition as a change of the catalog only, no partition rewritten, and the records
# stored before it read null.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('records', '0031_redaction_rules'),
    ]

    operations = [
        migrations.AddField(
            model_name='record',
            name='release',
            field=models.CharField(blank=True, max_length=200, null=True),
        ),
    ]

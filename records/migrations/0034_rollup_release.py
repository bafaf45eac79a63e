# The release becomes a rollup dimension beside the agent. The column has a constant default, so
# on PostgreSQL adding it changes the catalog only, and every row kept reads "" (no release);
# the unique key that the catch-up's UPSERT names (ON CONFLICT) is built again with it, last.
# Runs keep their release as they keep their agent, and a classification the release of its
# first rung-0 attempt; both fill in as the catch-up folds (manage.py rebuild_rollups refolds
# what was folded before). rollup_kind_bucket is built again after the unique key: where the two
# cost the same to PostgreSQL's planner (a table without statistics), it takes the index built
# last, and a read of a few kinds must walk rollup_kind_bucket (migration 0021).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('records', '0033_membership_roles'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='rollup',
            name='rollup_kind_bucket',
        ),
        migrations.RemoveConstraint(
            model_name='rollup',
            name='rollup_unique',
        ),
        migrations.AddField(
            model_name='classification',
            name='release',
            field=models.CharField(blank=True, db_default='', default='', max_length=200),
        ),
        migrations.AddField(
            model_name='rollup',
            name='release',
            field=models.CharField(blank=True, db_default='', default='', max_length=200),
        ),
        migrations.AddField(
            model_name='run',
            name='release',
            field=models.CharField(blank=True, max_length=200, null=True),
        ),
        migrations.AddConstraint(
            model_name='rollup',
            constraint=models.UniqueConstraint(fields=('project', 'grain', 'bucket', 'kind', 'agent', 'model', 'key', 'release'), name='rollup_unique'),
        ),
        migrations.AddIndex(
            model_name='rollup',
            index=models.Index(fields=['project', 'grain', 'kind', 'bucket'], name='rollup_kind_bucket'),
        ),
    ]

"""Deploy markers: when each release of an agent began, posted or seen in its first record."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('records', '0034_rollup_release'),
    ]

    operations = [
        migrations.CreateModel(
            name='ReleaseMarker',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('agent', models.CharField(blank=True, default='', max_length=200)),
                ('name', models.CharField(max_length=200)),
                ('time', models.DateTimeField(default=django.utils.timezone.now)),
                ('description', models.TextField(blank=True, default='', max_length=2000)),
                ('link', models.CharField(blank=True, default='', max_length=2000)),
                ('source', models.CharField(choices=[('api', 'api'), ('first record', 'first record')], default='api', max_length=20)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                ('updated_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='release_markers', to='records.project')),
            ],
            options={
                'indexes': [models.Index(fields=['project', 'time'], name='release_marker_time')],
                'constraints': [models.UniqueConstraint(fields=('project', 'agent', 'name'), name='release_marker_unique')],
            },
        ),
    ]

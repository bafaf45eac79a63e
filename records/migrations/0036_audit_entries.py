"""The audit log: one row a change to a project's keys, members, alerting, prices and settings,
read newest first by project (the index)."""

from __future__ import annotations

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('records', '0035_release_markers'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='AuditEntry',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('at', models.DateTimeField(default=django.utils.timezone.now)),
                ('actor_kind', models.CharField(choices=[('user', 'user'), ('key', 'API key'), ('system', 'command')], max_length=10)),
                ('actor_name', models.CharField(max_length=200)),
                ('action', models.CharField(max_length=40)),
                ('object_type', models.CharField(max_length=40)),
                ('object_id', models.CharField(blank=True, max_length=64)),
                ('object_name', models.CharField(blank=True, max_length=200)),
                ('before', models.JSONField(blank=True, null=True)),
                ('after', models.JSONField(blank=True, null=True)),
                ('address', models.GenericIPAddressField(blank=True, null=True)),
                ('actor_key', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='records.apikey')),
                ('actor_user', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='audit_entries', to='records.project')),
            ],
            options={
                'verbose_name': 'audit entry',
                'verbose_name_plural': 'audit entries',
                'indexes': [models.Index(fields=['project', '-id'], name='audit_entry_project_id')],
            },
        ),
    ]

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("workers", "0003_heartbeat_worker_started"),
    ]

    operations = [
        migrations.CreateModel(
            name="WorkerHost",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("host", models.CharField(max_length=200)),
                ("worker", models.CharField(max_length=200)),
                ("queue", models.CharField(max_length=100)),
                ("started_at", models.DateTimeField()),
                ("last_seen", models.DateTimeField()),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("worker", "queue"), name="worker_host_worker_queue"
                    )
                ],
            },
        ),
    ]

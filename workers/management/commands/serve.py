"""Start the whole product: migrate, demo data, an operator login, web, the OTLP/gRPC receiver,
Celery workers and beat.

`bin/start` runs this after installing. It is for a laptop or a demo box; production runs
gunicorn, `manage.py serve_otlp_grpc`, `celery -A config beat` and a `celery -A config worker
--queues …` per queue of config.queues under its own supervisor.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import transaction

from config.queues import Queue
from dashboard.http.staticfiles import ensure_collected
from records.models import ApiKey, Project, Record
from records.store import audit_trail
from workers import heartbeat, processes

# The banner's example body: five records of examples/, posted with the printed key.
EXAMPLE_BATCH = Path(settings.BASE_DIR) / "examples" / "batch.json"


class Command(BaseCommand):
    help = (
        "Run web (gunicorn), the OTLP/gRPC receiver, the Celery workers with beat, and load "
        "demo data on first start."
    )

    def add_arguments(self, parser):
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--web-workers", type=int, default=2)
        parser.add_argument(
            "--demo-records",
            type=int,
            default=20000,
            help="demo records to load when the demo project is empty (0: none)",
        )
        parser.add_argument("--demo-runs", type=int, default=200)

    def handle(self, *args, host, port, web_workers, demo_records, demo_runs, **options):
        call_command("migrate", interactive=False, verbosity=0)
        self.stdout.write("Database ready.")
        # Hashed, compressed static files for WhiteNoise (dashboard.http.staticfiles).
        if ensure_collected():
            self.stdout.write("Static files collected.")
        demo = Project.objects.filter(name="demo").first()
        if demo_records and (demo is None or not Record.objects.filter(project=demo).exists()):
            self.stdout.write(f"Loading {demo_records:,} demo records…")
            call_command(
                "seed_demo",
                project="demo",
                records=demo_records,
                runs=demo_runs,
                stdout=self.stdout,
            )
        username, password = self._operator()
        api_key = self._demo_key()

        grpc_port = settings.DECISIONBOARD["OTLP_GRPC_PORT"]
        children = self._start_children(host, port, web_workers, grpc_port)
        url = f"http://{host}:{port}/"
        grpc_line = (
            f"  OTLP/gRPC:   {host}:{grpc_port}   (metadata authorization: Bearer <key>)\n"
            if grpc_port
            else "  OTLP/gRPC:   off (DECISIONBOARD_OTLP_GRPC_PORT=0)\n"
        )
        self.stdout.write(
            "\n"
            f"Decisionboard is running at {url}\n"
            f"  log in as:   {username} / {password}\n"
            f"  ingest key:  {api_key}   (project demo)\n"
            f"  post:        curl -H 'Authorization: Bearer {api_key}' "
            f"-H 'Content-Type: application/json' --data-binary @{EXAMPLE_BATCH} "
            f"{url}api/v1/records\n"
            f"{grpc_line}"
            "  examples:    .venv/bin/python manage.py load_examples   "
            "(the sample records, shifted to now)\n"
            f"  database:    {settings.DATABASES['default']['NAME']}\n"
            f"  broker:      {settings.CELERY_BROKER_URL} (workers: default with beat; "
            "notifications and exports)\n"
            "Stop with Ctrl-C.\n"
        )
        self.stdout.flush()
        self._supervise(children)

    def _operator(self) -> tuple[str, str]:
        """The operator login, created once; its password is kept in var/ to print each start."""
        username = "admin"
        secret_file = Path(settings.VAR_DIR) / "operator_password"
        user_model = get_user_model()
        user = user_model.objects.filter(username=username).first()
        if user is not None and secret_file.exists():
            return username, secret_file.read_text().strip()
        password = secrets.token_urlsafe(12)
        if user is None:
            user_model.objects.create_superuser(username, "", password)
        else:
            user.set_password(password)
            user.save(update_fields=["password"])
        secret_file.write_text(password)
        secret_file.chmod(0o600)
        return username, password

    def _demo_key(self) -> str:
        key_file = Path(settings.VAR_DIR) / "demo_api_key"
        if key_file.exists():
            return key_file.read_text().strip()
        with transaction.atomic():
            project, _ = Project.objects.get_or_create(name="demo")
            key, raw = ApiKey.issue(project, ApiKey.Scope.ALL, name="demo (bin/start)")
            audit_trail.record_change(
                "create", key, actor=audit_trail.command_actor("manage.py serve"), before=None
            )
        key_file.write_text(raw)
        key_file.chmod(0o600)
        return raw

    def _start_children(
        self, host: str, port: int, web_workers: int, grpc_port: int
    ) -> list[subprocess.Popen]:
        web = processes.web_command(
            f"{host}:{port}", web_workers, "--access-logfile", "-", "--graceful-timeout", "5"
        )
        receivers = [processes.otlp_grpc_command(host, grpc_port)] if grpc_port else []
        workers = processes.worker_commands(settings.CELERY_BEAT_SCHEDULE_FILENAME)
        children = [processes.spawn(cmd) for cmd in (web, *receivers, *workers)]
        # Its workers consume every queue: until they are ready (they record it too) and beat's
        # first heartbeat reaches them, `manage.py doctor` reads the queues as starting.
        heartbeat.worker_started(Queue)
        return children

    def _supervise(self, children: list[subprocess.Popen]) -> None:
        stopping = False

        def stop(*_):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        try:
            while not stopping:
                dead = [c for c in children if c.poll() is not None]
                if dead:
                    self.stderr.write(
                        f"{dead[0].args[0]} exited with {dead[0].returncode}; stopping."
                    )
                    break
                time.sleep(0.5)
        finally:
            processes.stop(children)
        if not stopping:
            raise SystemExit(1)

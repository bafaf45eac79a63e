from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils.text import slugify

from records.models import ApiKey, Project
from records.store import audit_trail


class Command(BaseCommand):
    help = (
        "Create an API key for PROJECT (creating the project if it does not exist) and print the "
        "key alone on the last line. The key is stored hashed and cannot be shown again."
    )

    def add_arguments(self, parser):
        parser.add_argument("project", help="project name (a slug: letters, digits, - and _)")
        parser.add_argument(
            "--scope",
            choices=[c.value for c in ApiKey.Scope],
            default=ApiKey.Scope.INGEST,
            help="ingest (post records), read (read API) or all; default ingest",
        )
        parser.add_argument("--name", default="", help="a label to recognise the key by")

    def handle(self, *args, project: str, scope: str, name: str, **options):
        if slugify(project) != project:
            raise CommandError(
                f"{project!r} is not a valid project name; use letters, digits, - and _ "
                f"(e.g. {slugify(project) or 'my-project'!r})"
            )
        with transaction.atomic():
            proj, created = Project.objects.get_or_create(name=project)
            key, raw = ApiKey.issue(proj, scope=scope, name=name)
            audit_trail.record_change(
                "create",
                key,
                actor=audit_trail.command_actor("manage.py create_api_key"),
                before=None,
            )
        if created:
            self.stdout.write(f"Created project {proj.name}.")
        self.stdout.write(f"Created {scope} key {key.prefix}… for {proj.name}; it is shown once:")
        self.stdout.write(raw)

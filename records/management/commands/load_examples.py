from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.text import slugify

from records import catchup
from records.contract.normalise import NormalisedRecord, normalise
from records.demo import examples
from records.models import Project
from records.store.writer import store_records


class Command(BaseCommand):
    help = (
        "Store the sample records of examples/records.jsonl in PROJECT (demo by default; created "
        "when missing), shifted so that the newest is a minute old, and roll them up, so that "
        "they show on every page at once. Their ids are kept: loading them again adds nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("--project", default="demo", help="project name (a slug); demo")
        parser.add_argument(
            "--file", default=str(examples.EXAMPLES), help="an NDJSON file of records"
        )

    def handle(self, *args, project: str, file: str, **options):
        if slugify(project) != project:
            raise CommandError(
                f"{project!r} is not a valid project name; use letters, digits, -, _"
            )
        path = Path(file)
        if not path.exists():
            raise CommandError(f"{path} does not exist")
        now = timezone.now()
        raw = examples.shifted(
            examples.read(path), now.replace(microsecond=0) - timedelta(minutes=1)
        )
        normalised = [normalise(r, now=now) for r in raw]
        bad = [(r.get("id"), n) for r, n in zip(raw, normalised, strict=True)
               if not isinstance(n, NormalisedRecord)]  # fmt: skip
        if bad:
            raise CommandError(f"example {bad[0][0]} does not validate: {bad[0][1]}")
        proj, created = Project.objects.get_or_create(name=project)
        stored = store_records(proj.pk, normalised, timezone.now())
        catchup.catch_up()  # what the workers do next: the pages show them at once
        if created:
            self.stdout.write(f"Created project {proj.name}.")
        self.stdout.write(
            f"Loaded {stored.accepted} example records into {proj.name}"
            + (
                f" ({stored.duplicates} were already there, with the times of their first load)"
                if stored.duplicates
                else ""
            )  # fmt: skip
            + "; the newest is a minute old."
        )

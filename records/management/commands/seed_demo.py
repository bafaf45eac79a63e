from __future__ import annotations

import time
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.text import slugify

from records import catchup
from records.demo.generator import generate_records
from records.models import Project
from records.store.ingest import ingest


class Command(BaseCommand):
    help = (
        "Fill PROJECT (created when missing) with realistic demo decision records spread over "
        "the past DAYS. Records go through the same normalisation and store as ingest. Ids are "
        "stable per seed, so running it again with the same arguments adds nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("--project", default="demo", help="project name (a slug); demo")
        parser.add_argument("--records", type=int, default=5000, help="records to seed; 5000")
        parser.add_argument("--runs", type=int, default=100, help="agent runs to spread them over")
        parser.add_argument("--seed", type=int, default=0, help="random seed; 0")
        parser.add_argument(
            "--days", type=float, default=1.0, help="how far back the timestamps go, ending now; 1"
        )
        parser.add_argument(
            "--batch", type=int, default=2000, help="records per database transaction; 2000"
        )
        parser.add_argument(
            "--skip-rollups",
            action="store_true",
            help="leave the rollups to the workers instead of catching up before returning",
        )

    def handle(
        self,
        *args,
        project: str,
        records: int,
        runs: int,
        seed: int,
        days: float,
        batch: int,
        verbosity: int = 1,
        **options,
    ):
        if records < 1:
            raise CommandError(f"--records must be at least 1 (got {records})")
        if runs < 1:
            raise CommandError(f"--runs must be at least 1 (got {runs})")
        if runs > records:
            raise CommandError(
                f"--runs ({runs}) cannot exceed --records ({records}): every run needs a record"
            )
        if not days > 0:
            raise CommandError(f"--days must be more than 0 (got {days})")
        if batch < 1:
            raise CommandError(f"--batch must be at least 1 (got {batch})")
        if slugify(project) != project:
            raise CommandError(
                f"{project!r} is not a valid project name; use letters, digits, - and _"
            )

        proj, created = Project.objects.get_or_create(name=project)
        if created and verbosity:
            self.stdout.write(f"Created project {proj.name}.")
        started = time.monotonic()
        now = timezone.now()
        generated = generate_records(
            records=records,
            runs=runs,
            seed=seed,
            end=now.replace(microsecond=0),
            span=timedelta(days=days),
        )
        accepted = duplicates = done = seen_runs = 0
        last_run = None
        step = max(batch, records // 10)  # about ten progress lines, whatever the size
        next_report = step
        pending: list[dict] = []

        def store(raws: list[dict]) -> None:
            # The ingest path itself (records.store.ingest), with its limits: demo data is only ever
            # what an agent could have posted.
            nonlocal accepted, duplicates
            result = ingest(proj.id, enumerate(raws), now=now)
            if result.rejected:
                # A bug in the generator, not bad input: stop before storing more of it.
                first = result.rejected[0]
                raise CommandError(
                    f"demo record {first['id']} does not validate: {first['errors']}"
                )
            accepted += result.accepted
            duplicates += result.duplicates

        for raw in generated:
            if raw["run_id"] != last_run:  # records come run after run
                last_run = raw["run_id"]
                seen_runs += 1
            pending.append(raw)
            if len(pending) >= batch:
                store(pending)
                done += len(pending)
                pending = []
                if done >= next_report and done < records and verbosity:
                    rate = done / max(time.monotonic() - started, 1e-9)
                    self.stdout.write(
                        f"  {done:,}/{records:,} records ({done * 100 // records}%), "
                        f"{rate:,.0f} records/s"
                    )
                    next_report += step
        if pending:
            store(pending)
        elapsed = time.monotonic() - started
        if verbosity:
            self.stdout.write(
                f"seeded {accepted} records ({duplicates} duplicates) in {seen_runs} runs "
                f"for project {proj.name} in {elapsed:.1f} s"
            )
        if not options.get("skip_rollups"):
            # What the workers would do next: the demo's pages and metrics are ready at once.
            started = time.monotonic()
            folded = catchup.catch_up(max_seconds=24 * 3600)
            if verbosity:
                self.stdout.write(
                    f"rolled up {folded:,} records in {time.monotonic() - started:.1f} s"
                )

from __future__ import annotations

from itertools import groupby

from django.core.management.base import BaseCommand, CommandError

from ops.doctor import examine


class Command(BaseCommand):
    help = (
        "Check this installation's configuration, services, migrations and queues, and say what "
        "to fix; exits 1 when something must be fixed."
    )
    # Runs Django's checks itself (the deployment ones included), and must run with the
    # database down.
    requires_system_checks: list = []

    def handle(self, *args, **options) -> None:
        findings = examine()
        for section, items in groupby(findings, key=lambda f: f.section):
            self.stdout.write(section)
            for finding in items:
                mark = "ok  " if finding.ok else ("note" if finding.note else "FIX ")
                style = (
                    self.style.SUCCESS
                    if finding.ok
                    else (self.style.WARNING if finding.note else self.style.ERROR)
                )
                self.stdout.write(f"  {style(mark)}  {finding.message}")
                if finding.fix and not finding.ok:
                    self.stdout.write(f"        -> {finding.fix}")
        problems = sum(1 for f in findings if f.problem)
        if problems:
            raise CommandError(f"{problems} thing{'s' if problems > 1 else ''} to fix (see FIX)")
        self.stdout.write(self.style.SUCCESS("Nothing to fix."))

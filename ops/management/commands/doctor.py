from __future__ import annotations

from itertools import groupby

from django.core.management.base import BaseCommand, CommandError

from ops.doctor import examine


class Command(BaseCommand):
    help = (
        "Check this installation's services, migrations, queues and partitions, and its "
        "readiness for production, and say what to fix; exits 1 when something is broken. With "
        "--deploy, the checklist before going live: exits 1 on the readiness items too."
    )
    # Runs Django's checks itself (the deployment ones included), and must run with the
    # database down.
    requires_system_checks: list = []

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--deploy",
            action="store_true",
            help="fail on production-readiness items too (SQLite, the generated SECRET_KEY, "
            "ALLOWED_HOSTS, HTTPS, ...), as `check --deploy` does; without it they are advice",
        )

    def handle(self, *args, deploy: bool = False, **options) -> None:
        findings = examine()
        for section, items in groupby(findings, key=lambda f: f.section):
            self.stdout.write(section)
            for finding in items:
                if finding.ok:
                    mark, style = "ok  ", self.style.SUCCESS
                elif finding.fails(deploy):
                    mark, style = "FIX ", self.style.ERROR
                elif finding.advice:
                    mark, style = "prod", self.style.WARNING
                else:
                    mark, style = "note", self.style.WARNING
                self.stdout.write(f"  {style(mark)}  {finding.message}")
                if finding.fix and not finding.ok:
                    self.stdout.write(f"        -> {finding.fix}")
        failing = sum(1 for f in findings if f.fails(deploy))
        if failing:
            raise CommandError(f"{failing} thing{'s' if failing > 1 else ''} to fix (see FIX)")
        advice = sum(1 for f in findings if f.advice)
        if advice and not deploy:
            self.stdout.write(
                f"{advice} thing{'s' if advice > 1 else ''} to do before going live (see prod; "
                "`manage.py doctor --deploy` fails on them)."
            )
        self.stdout.write(self.style.SUCCESS("Nothing to fix."))

"""manage.py rebuild_rollups: derive every stored record again and let the workers rebuild."""

from __future__ import annotations

from django.apps import apps
from django.core.management.base import BaseCommand

from records import catchup


class Command(BaseCommand):
    help = (
        "Derive every stored record again from its data, drop the rollups, classifications, "
        "tool decisions, streaks and run summaries, and rewind the watermark so the workers "
        "fold everything in anew (after a change to a derivation)."
    )

    def handle(self, *args, **options):
        models = {model.__name__: model for model in apps.get_app_config("records").get_models()}
        done = catchup.rebuild(
            models, progress=lambda n: self.stdout.write(f"re-derived {n:,} records")
        )
        self.stdout.write(
            f"Re-derived {done:,} records; the rollups are rebuilt by the catch-up pass "
            "(any running worker)."
        )

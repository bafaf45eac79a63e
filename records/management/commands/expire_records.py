from __future__ import annotations

from django.core.management.base import BaseCommand

from records.store import retention


class Command(BaseCommand):
    help = (
        "Expire the records, rollups and runs past retention and, on PostgreSQL, create the "
        "daily partitions ahead: what the beat task expire-records does every hour "
        "(records.store.retention). Safe to run at any time, and again."
    )

    def handle(self, *args, **options):
        done = retention.expire()
        dropped = ", ".join(done.partitions_dropped) or "none"
        self.stdout.write(f"partitions dropped: {dropped}")
        if done.partitions_waiting:
            self.stdout.write(
                "past retention but not rolled up yet (dropped once the catch-up has folded "
                f"them in): {', '.join(done.partitions_waiting)}"
            )
        self.stdout.write(
            f"records deleted: {done.records_deleted:,}; keys deleted: {done.keys_deleted:,}; "
            f"rollups deleted: {done.rollups_deleted:,}; runs deleted: {done.runs_deleted:,}"
        )

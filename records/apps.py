from __future__ import annotations

from django.apps import AppConfig
from django.db.backends.signals import connection_created


class RecordsConfig(AppConfig):
    name = "records"
    verbose_name = "Decision records"

    def ready(self) -> None:
        from records.store.sqlfunctions import register_sqlite

        connection_created.connect(register_sqlite, dispatch_uid="records-json-add")

from __future__ import annotations

from django.apps import AppConfig


class RecordsConfig(AppConfig):
    name = "records"
    verbose_name = "Decision records"

from __future__ import annotations

from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "Operator pages"

    def ready(self) -> None:
        # Connects the login signal that caches the operator's projects for the header.
        from dashboard.web import access  # noqa: F401

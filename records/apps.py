from __future__ import annotations

from django.apps import AppConfig
from django.db.backends.signals import connection_created
from django.db.models.signals import post_migrate


class RecordsConfig(AppConfig):
    name = "records"
    verbose_name = "Decision records"

    def ready(self) -> None:
        from django.db.models.signals import pre_delete

        from records.catchup import rebuild_if_requested
        from records.models import Project
        from records.store.sqlfunctions import register_functions, set_role_defaults
        from records.store.writer import hold_project_for_delete

        connection_created.connect(register_functions, dispatch_uid="records-json-add")
        post_migrate.connect(set_role_defaults, sender=self, dispatch_uid="records-role-defaults")
        post_migrate.connect(rebuild_if_requested, sender=self, dispatch_uid="records-rebuild")
        pre_delete.connect(
            hold_project_for_delete, sender=Project, dispatch_uid="records-project-delete-lock"
        )

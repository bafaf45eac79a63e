"""A member's role in a project: the order of the roles, the projects a role may act on, and the
migration that made every member from before roles an admin."""

from __future__ import annotations

from importlib import import_module
from types import SimpleNamespace

from django.apps import apps
from django.contrib.auth import get_user_model
from django.db import connection

from records.models import Membership, Project, Role


def test_each_role_covers_the_ones_below_it():
    assert Role.ADMIN.covers(Role.EDITOR) and Role.ADMIN.covers(Role.VIEWER)
    assert Role.EDITOR.covers(Role.VIEWER) and Role.EDITOR.covers(Role.EDITOR)
    assert not Role.EDITOR.covers(Role.ADMIN) and not Role.VIEWER.covers(Role.EDITOR)
    assert Role.at_least(Role.EDITOR) == [Role.EDITOR, Role.ADMIN]
    assert [r.with_article for r in Role] == ["a viewer", "an editor", "an admin"]


def test_a_new_member_is_a_viewer(db):
    user = get_user_model().objects.create_user("carol")
    membership = Membership.objects.create(user=user, project=Project.objects.create(name="acme"))
    assert membership.role == Role.VIEWER
    assert membership.project.role_of(user) == Role.VIEWER


def test_the_projects_a_role_may_act_on(db):
    user = get_user_model().objects.create_user("carol")
    acme, globex, initech = (Project.objects.create(name=n) for n in ("acme", "globex", "initech"))
    Membership.objects.create(user=user, project=acme, role=Role.ADMIN)
    Membership.objects.create(user=user, project=globex, role=Role.VIEWER)

    def names(role=Role.VIEWER):
        return sorted(Project.objects.for_user(user, role).values_list("name", flat=True))

    assert names() == ["acme", "globex"]
    assert names(Role.EDITOR) == names(Role.ADMIN) == ["acme"]
    assert initech.role_of(user) is None
    boss = get_user_model().objects.create_superuser("boss")
    assert initech.role_of(boss) == Role.ADMIN
    assert Project.objects.for_user(boss, Role.ADMIN).count() == 3


def test_the_migration_makes_every_member_from_before_roles_an_admin(db):
    project = Project.objects.create(name="acme")
    for name, role in (("v", Role.VIEWER), ("e", Role.EDITOR)):
        user = get_user_model().objects.create_user(name)
        Membership.objects.create(user=user, project=project, role=role)

    migration = import_module("records.migrations.0033_membership_roles")
    migration.existing_members_are_admins(apps, SimpleNamespace(connection=connection))

    assert set(Membership.objects.values_list("role", flat=True)) == {Role.ADMIN}

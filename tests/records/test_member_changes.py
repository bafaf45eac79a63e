"""The changes of a project's members (records.member_changes): a role given, changed and taken
but never from the last admin, and an invitation's link used once, on one database connection
and on two at once."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from django.contrib.auth import get_user_model
from django.db import connections, transaction

from records import member_changes
from records.member_changes import InvitationUnusable, MemberChangeRefused
from records.models import Invitation, Project, Role
from tests.support.services import database_url


@pytest.fixture
def acme(db) -> Project:
    return Project.objects.create(name="acme")


def people(*names: str) -> list:
    return [get_user_model().objects.create_user(name) for name in names]


def test_a_role_is_given_changed_and_taken_but_never_from_the_last_admin(acme):
    ada, eve = people("ada", "eve")
    member_changes.change_role(acme, ada, Role.ADMIN)
    member_changes.change_role(acme, eve, Role.EDITOR)
    assert acme.role_of(eve) == Role.EDITOR
    with pytest.raises(MemberChangeRefused, match="ada is the last admin of acme"):
        member_changes.change_role(acme, ada, Role.VIEWER)
    with pytest.raises(MemberChangeRefused, match="last admin"):
        member_changes.remove_member(acme, ada)  # leaving, too
    assert acme.role_of(ada) == Role.ADMIN
    member_changes.change_role(acme, eve, Role.ADMIN)
    member_changes.remove_member(acme, ada)
    assert acme.role_of(ada) is None and acme.role_of(eve) == Role.ADMIN


def test_a_project_without_admins_may_get_members_of_any_role(acme):
    # Projects made before any admin (by create_api_key) are run by superusers until given one.
    (vic,) = people("vic")
    member_changes.change_role(acme, vic, Role.VIEWER)
    member_changes.remove_member(acme, vic)
    assert acme.role_of(vic) is None


def wait_for_a_lock_wait(seconds: float = 10) -> None:
    """Until some backend of the test database waits for a lock (seen from a connection of its
    own: pg_stat_activity is read once per transaction)."""
    deadline = time.monotonic() + seconds
    with psycopg.connect(database_url(), autocommit=True) as watcher:
        while time.monotonic() < deadline:
            waiting = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'"
            ).fetchone()[0]
            if waiting:
                return
            time.sleep(0.02)
    raise AssertionError("nothing waited for a lock")


def in_thread(function) -> tuple[threading.Thread, list]:
    """Run `function` on a thread of its own, so on a database connection of its own."""
    outcome: list = []

    def run():
        try:
            outcome.append(function())
        except Exception as exc:
            outcome.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_a_demotion_waits_for_another_under_way_and_then_keeps_the_last_admin(
    transactional_db, postgres
):
    acme = Project.objects.create(name="acme")
    ada, bo = people("ada", "bo")
    for admin in (ada, bo):
        member_changes.change_role(acme, admin, Role.ADMIN)
    with transaction.atomic():
        member_changes.change_role(acme, ada, Role.VIEWER)  # passes: bo is still an admin
        demoting, outcome = in_thread(lambda: member_changes.change_role(acme, bo, Role.VIEWER))
        wait_for_a_lock_wait()  # bo's demotion, on the project row ada's holds
        assert demoting.is_alive()
    demoting.join(10)
    assert isinstance(outcome[0], MemberChangeRefused), outcome
    assert "bo is the last admin of acme" in str(outcome[0])
    assert (acme.role_of(ada), acme.role_of(bo)) == (Role.VIEWER, Role.ADMIN)


def test_a_link_accepted_twice_at_once_makes_one_member(transactional_db, postgres):
    acme = Project.objects.create(name="acme")
    vic = get_user_model().objects.create_user("vic", email="vic@example.com")
    links: list[str] = []
    member_changes.invite(acme, "vic@example.com", Role.EDITOR, None, lambda i, t: links.append(t))
    with transaction.atomic():
        member_changes.accept(links[0], vic)
        again, outcome = in_thread(lambda: member_changes.accept(links[0], vic))
        wait_for_a_lock_wait()  # the second acceptance, on the row the first holds
        assert again.is_alive()
    again.join(10)
    assert isinstance(outcome[0], InvitationUnusable), outcome
    assert outcome[0].reason == Invitation.Unusable.ACCEPTED
    assert list(acme.memberships.values_list("user__username", "role")) == [("vic", "editor")]

"""The audit log page (/project/audit/): a project's admins read who changed what, newest first,
in keyset pages, filtered by action, object type and person; names are escaped."""

from __future__ import annotations

import re
from html import unescape

from django.db import transaction

from records.store import audit_trail
from tests.support.pages import operator


def write(project, names: list[str], *, actor: str = "carol", object_type: str = "channel"):
    who = audit_trail.Actor("user", actor, address="192.0.2.1")
    with transaction.atomic():
        for name in names:
            audit_trail.record(
                project, "create", object_type, actor=who, object_name=name, after={"n": name}
            )


def rows(page: str) -> list[str]:
    """The object column of each row: type and name."""
    found = re.findall(r'<tr class="audit-row"[^>]*>(.*?)</tr>', page, re.S)
    return [unescape(re.findall(r"<td>(.*?)</td>", row, re.S)[3]) for row in found]


def test_an_admin_pages_through_the_log_newest_first(alice, settings):
    write(alice.project, [f"c{i:02}" for i in range(60)])
    client = operator("alice", alice)
    page = client.get("/project/audit/?project=acme").content.decode()
    assert rows(page)[:2] == ["channel c59", "channel c58"] and len(rows(page)) == 50
    older = re.search(r'<a href="\?([^"]*)">Older entries</a>', page)
    assert older and "before=" in older.group(1)
    rest = client.get("/project/audit/?" + unescape(older.group(1))).content.decode()
    assert rows(rest) == [f"channel c{i:02}" for i in range(9, -1, -1)]
    assert "Older entries" not in rest


def test_it_filters_by_person_and_object_type(alice):
    write(alice.project, ["one"], actor="carol")
    write(alice.project, ["two"], actor="dave", object_type="price_override")
    client = operator("alice", alice)
    page = client.get("/project/audit/?actor=dave").content.decode()
    assert rows(page) == ["price_override two"]
    assert "<option selected>dave</option>" in page and "<option>carol</option>" in page
    page = client.get("/project/audit/?object_type=channel").content.decode()
    assert rows(page) == ["channel one"]
    assert "format=csv&amp;object_type=channel" in page.replace("project=acme&amp;", "")


def test_names_in_the_log_are_escaped(alice):
    write(alice.project, ['<script>alert("x")</script>'], actor="<b>mallory</b>")
    page = operator("alice", alice).get("/project/audit/").content.decode()
    assert "<script>alert" not in page and "<b>mallory" not in page
    assert rows(page) == ['channel <script>alert("x")</script>']


def test_the_project_page_links_its_admins_to_the_log(alice):
    assert "/project/audit/" in operator("alice", alice).get("/project/").content.decode()
    viewer = operator("vic", alice, role="viewer")
    assert "/project/audit/" not in viewer.get("/project/").content.decode()
    assert viewer.get("/project/audit/").status_code == 403

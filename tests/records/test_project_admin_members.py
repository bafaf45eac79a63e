"""Members changed by staff in Django's admin, on the project's page there: the same changes and
the same rule as on the Project page (records.member_changes), the last admin kept."""

from __future__ import annotations

from html.parser import HTMLParser

from django.contrib.auth import get_user_model
from django.test import Client

from records.models import Membership, Project


class FormFields(HTMLParser):
    """The values a browser would post from the page's form: inputs, checked boxes, selected
    options, text areas."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, str] = {}
        self.select: str | None = None
        self.textarea: str | None = None

    def handle_starttag(self, tag, attrs) -> None:
        a = dict(attrs)
        name = a.get("name")
        if tag == "input" and name and a.get("type") not in ("submit", "button", "file"):
            if a.get("type") in ("checkbox", "radio"):
                if "checked" in a:
                    self.values[name] = a.get("value", "on")
            else:
                self.values[name] = a.get("value") or ""
        elif tag == "select" and name:
            self.select = name
            self.values.setdefault(name, "")
        elif tag == "option" and self.select and "selected" in a:
            self.values[self.select] = a.get("value") or ""
        elif tag == "textarea" and name:
            self.textarea = name
            self.values[name] = ""

    def handle_endtag(self, tag) -> None:
        if tag == "select":
            self.select = None
        elif tag == "textarea":
            self.textarea = None

    def handle_data(self, data) -> None:
        if self.textarea:
            self.values[self.textarea] += data


def change_form(client: Client, project: Project) -> tuple[str, dict[str, str]]:
    url = f"/admin/records/project/{project.pk}/change/"
    parser = FormFields()
    parser.feed(client.get(url).content.decode())
    return url, parser.values


def row_of(values: dict[str, str], membership: Membership) -> str:
    return next(
        k[: -len("-id")]
        for k, v in values.items()
        if k.startswith("memberships-") and k.endswith("-id") and v == str(membership.pk)
    )


def roles(project: Project) -> dict[str, str]:
    return dict(project.memberships.values_list("user__username", "role"))


def test_staff_change_roles_in_the_admin_but_never_leave_the_project_without_admin(db):
    boss = get_user_model().objects.create_superuser("boss", password="pw")
    client = Client()
    client.force_login(boss)
    acme = Project.objects.create(name="acme")
    ada, eve = (get_user_model().objects.create_user(n) for n in ("ada", "eve"))
    ada_row = Membership.objects.create(user=ada, project=acme, role="admin")
    eve_row = Membership.objects.create(user=eve, project=acme, role="viewer")

    url, values = change_form(client, acme)
    refused = client.post(url, {**values, f"{row_of(values, ada_row)}-role": "viewer"})
    assert refused.status_code == 200
    assert "acme keeps at least one admin" in refused.content.decode()
    refused = client.post(url, {**values, f"{row_of(values, ada_row)}-DELETE": "on"})
    assert "acme keeps at least one admin" in refused.content.decode()
    assert roles(acme) == {"ada": "admin", "eve": "viewer"}

    ada_field, eve_field = f"{row_of(values, ada_row)}-role", f"{row_of(values, eve_row)}-role"
    swapped = client.post(url, {**values, ada_field: "viewer", eve_field: "admin"})
    assert swapped.status_code == 302
    assert roles(acme) == {"ada": "viewer", "eve": "admin"}

    url, values = change_form(client, acme)
    removed = client.post(url, {**values, f"{row_of(values, ada_row)}-DELETE": "on"})
    assert removed.status_code == 302
    assert roles(acme) == {"eve": "admin"}

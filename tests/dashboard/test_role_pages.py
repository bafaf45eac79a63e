"""The pages offer a member only the actions their role allows, and list the project's members
with their roles; a role too low is a 403 page that names the role needed."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from alerts.models import Channel, Rule
from records.models import ApiKey, Membership
from tests.support.pages import operator


def test_the_keys_page_offers_creating_and_revoking_to_admins_only(alice, bob):
    admin = operator("ada", alice)
    viewer = operator("vic", alice, role="viewer")
    page = admin.get("/keys/").content.decode()
    assert "Create a key" in page and page.count(">Revoke</button>") == 2
    page = viewer.get("/keys/").content.decode()
    assert "Create a key" not in page and ">Revoke</button>" not in page
    assert "Keys are created and revoked by a project's admins." in page
    assert alice.ingest_key_obj.prefix in page  # a viewer still sees which keys exist


def test_an_admin_of_one_project_mints_and_revokes_only_there(alice, bob):
    client = operator("ada", alice)
    user = get_user_model().objects.get(username="ada")
    Membership.objects.create(user=user, project=bob.project, role="viewer")
    page = client.get("/keys/").content.decode()
    form = page.split('class="key-form"')[1].split("</form>")[0]
    assert '<option value="acme"' in form and '<option value="globex"' not in form
    assert page.count(">Revoke</button>") == 2  # acme's two keys, not globex's
    response = client.post("/keys/", {"project": "globex", "scope": "ingest"})
    assert response.status_code == 403
    assert (
        "This needs the admin role in globex; you are a viewer there." in response.content.decode()
    )
    assert client.post(f"/keys/{bob.read_key_obj.pk}/revoke/").status_code == 403
    assert ApiKey.objects.filter(project=bob.project, revoked_at__isnull=True).count() == 2
    assert client.post(f"/keys/{alice.read_key_obj.pk}/revoke/").status_code == 302


def test_the_alerts_page_offers_its_actions_to_editors_only(alice):
    rule = Rule.objects.create(
        project=alice.project, name="slow", metric="pick_error_rate", comparator="gt", threshold=1
    )
    Channel.objects.create(
        project=alice.project, name="mail", kind="email", addresses=["a@example.com"]
    )
    editor = operator("eve", alice, role="editor").get("/alerts/").content.decode()
    assert "New rule" in editor and "New channel" in editor
    assert ">Pause</button>" in editor and ">Send test</button>" in editor
    assert f'href="/alerts/{rule.pk}/"' in editor and "/alerts/channels/" in editor
    viewer = operator("vic", alice, role="viewer").get("/alerts/").content.decode()
    assert "slow" in viewer and "mail" in viewer
    assert "New rule" not in viewer and "New channel" not in viewer
    assert ">Pause</button>" not in viewer and ">Send test</button>" not in viewer
    assert f'href="/alerts/{rule.pk}/"' not in viewer and "/alerts/channels/" not in viewer


def test_a_viewer_asking_for_an_editors_form_is_told_the_role(alice):
    response = operator("vic", alice, role="viewer").get("/alerts/new/")
    assert response.status_code == 403
    text = response.content.decode()
    assert "This needs the editor role in acme; you are a viewer there." in text
    assert "<h1>Not allowed</h1>" in text


def test_the_project_page_lists_the_members_with_their_roles(alice, bob):
    viewer = operator("vic", alice, role="viewer")
    operator("eve", alice, role="editor")
    operator("ada", alice)
    operator("bo", bob)
    page = viewer.get("/project/").content.decode()
    rows = [line for line in page.splitlines() if 'class="member-row"' in line]
    assert [r.split('data-member="')[1].split('"')[0] for r in rows] == ["ada", "eve", "vic"]
    assert "<td>ada</td><td>admin</td>" in page
    assert "<td>eve</td><td>editor</td>" in page and "<td>vic</td><td>viewer</td>" in page
    assert "bo" not in [r.split('data-member="')[1].split('"')[0] for r in rows]


def test_an_admin_gives_roles_and_sets_retention_on_the_project_page(alice):
    admin = operator("ada", alice)
    operator("vic", alice, role="viewer")
    page = admin.get("/project/").content.decode()
    assert "Give a role" in page and "Save settings" in page
    response = admin.post(
        "/project/members/", {"project": "acme", "username": "vic", "role": "editor"}, follow=True
    )
    assert "vic is now an editor in acme." in response.content.decode()
    assert alice.project.role_of(get_user_model().objects.get(username="vic")) == "editor"
    response = admin.post(
        "/project/members/", {"project": "acme", "username": "ada", "role": ""}, follow=True
    )
    assert "ada is the last admin of acme." in response.content.decode()
    admin.post("/project/settings/", {"project": "acme", "retention_days": "30"})
    alice.project.refresh_from_db()
    assert alice.project.retention_days == 30


def test_a_viewer_sees_the_members_but_no_form_to_change_them(alice):
    page = operator("vic", alice, role="viewer").get("/project/").content.decode()
    assert "<td>vic</td><td>viewer</td>" in page
    assert "Give a role" not in page and "Save settings" not in page and ">Remove<" not in page
    response = operator("eve", alice, role="editor").post(
        "/project/settings/", {"project": "acme", "retention_days": "1"}
    )
    assert response.status_code == 403
    assert (
        "This needs the admin role in acme; you are an editor there." in response.content.decode()
    )

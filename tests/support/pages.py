"""Reading the dashboard's pages as an operator: logins, posted records, a page's tables and
figures."""

from __future__ import annotations

import json
import re
from datetime import UTC, timedelta
from html import unescape

from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from records.models import Membership
from tests.support.factories import record

EVIL_TEXT = '<script>alert("text")</script><img src=x onerror=alert(1)>'


def operator(username: str, *personas, role: str = "admin") -> Client:
    """A logged-in member of the personas' projects, an admin of them unless a role is named."""
    user = get_user_model().objects.create_user(username, password="pw-" + username)
    for persona in personas:
        Membership.objects.create(user=user, project=persona.project, role=role)
    client = Client()
    client.force_login(user)
    return client


def post(persona, records: list[dict]) -> None:
    client = persona.client()
    for i in range(0, len(records), 500):
        response = client.post("/api/v1/records", {"records": records[i : i + 500]}, format="json")
        assert response.status_code == 200, response.content


def figure(page: str, dom_id: str) -> dict:
    """The figure a page embeds for the chart `dom_id` (its json_script element)."""
    match = re.search(
        rf'<script id="{re.escape(dom_id)}-figure" type="application/json">(.*?)</script>',
        page,
        re.S,
    )
    assert match, f"no figure {dom_id}"
    return json.loads(match.group(1))


def cells(page: str, table: str, compact: bool = True) -> list[list[str]]:
    opening = f'<table class="compact" id="{table}">' if compact else f'<table id="{table}">'
    body = re.search(rf"{opening}.*?<tbody>(.*?)</tbody>", page, re.S)
    assert body, table
    rows = re.findall(r"<tr>(.*?)</tr>", body.group(1), re.S)
    return [[text_of(c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)] for r in rows]


# --- the narrowing what-if's savings --------------------------------------------------------------
def decisions(persona, n: int) -> None:
    """n decisions offered four tools, ranked two, served those two, called the first: the full
    set serves 4 definitions, top 1 serves 1, top 2 and 3 serve 2."""
    out = []
    for i in range(n):
        envelope = {"run_id": f"run-n{i}", "ts": recent(i)}
        pick = {
            "offered": ["a", "b", "c", "d"],
            "ranked": [{"name": "a", "score": 0.9}, {"name": "b", "score": 0.5}],
            "chosen": "a",
            "served": ["a", "b"],
        }
        out.append(record("tool_choice.pick", data=pick, **envelope))
        envelope["ts"] = recent(i + 1)
        out.append(record("tool_choice.outcome", data={"called": ["a"]}, **envelope))
    post(persona, out)


def narrowing_page(client) -> str:
    return client.get("/narrowing/").content.decode()


def text_of(html: str) -> str:
    return unescape(re.sub(r"<[^>]+>", " ", html))


def recent(seconds: int) -> str:
    t = timezone.now().replace(microsecond=0) - timedelta(minutes=20) + timedelta(seconds=seconds)
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")

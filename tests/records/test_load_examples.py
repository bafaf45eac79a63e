"""`manage.py load_examples`: the shipped sample records, shifted to now, on every page."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from records.demo import examples
from records.models import Membership, Project, Record, Run


def test_it_loads_every_example_shifted_so_the_newest_is_a_minute_old(db):
    out = StringIO()
    call_command("load_examples", stdout=out)
    written = examples.read()
    demo = Project.objects.get(name="demo")
    assert Record.objects.filter(project=demo).count() == len(written) == 25
    newest = Record.objects.filter(project=demo).order_by("-ts").first().ts
    assert timedelta(0) < timezone.now() - newest < timedelta(minutes=2)
    # Spacing is kept: the first and last record are as far apart as in the file.
    oldest = Record.objects.filter(project=demo).order_by("ts").first().ts
    in_file = [parse_datetime(r["ts"]) for r in written]
    assert newest - oldest == max(in_file) - min(in_file)
    assert "Loaded 25 example records into demo" in out.getvalue()
    # Loading again adds nothing and says so.
    out = StringIO()
    call_command("load_examples", stdout=out)
    assert Record.objects.filter(project=demo).count() == 25
    assert "25 were already there" in out.getvalue()


def test_they_show_on_the_default_pages(db):
    call_command("load_examples", stdout=StringIO())
    operator = get_user_model().objects.create_user("carol", password="pw-carol-123")
    Membership.objects.create(user=operator, project=Project.objects.get(name="demo"))
    client = Client()
    client.force_login(operator)
    overview = client.get("/").content.decode()
    assert "No records in this period" not in overview
    assert 'data-kpi="records"' in overview and ">25<" in overview.replace(" ", "")
    assert "run-0001" in client.get("/runs/").content.decode()
    models = client.get("/models/").content.decode()
    assert "chart-swap-matrix-figure" in models
    assert set(Run.objects.values_list("run_id", flat=True)) == {"run-0001", "run-0002"}


def test_the_readmes_posts_answer_as_it_says(alice):
    """README "Send records": batch.json, then records.jsonl as NDJSON with --data-binary."""
    root = examples.EXAMPLES.parent
    client = alice.client()
    batch = client.post(
        "/api/v1/records", (root / "batch.json").read_bytes(), content_type="application/json"
    )
    assert batch.json() == {"accepted": 5, "duplicates": 0, "rejected": []}
    body = (root / "records.jsonl").read_bytes()
    ndjson = client.post("/api/v1/records", body, content_type="application/x-ndjson")
    assert ndjson.json() == {"accepted": 20, "duplicates": 5, "rejected": []}
    # What curl's --data sends: the newlines stripped, one long invalid line.
    stripped = client.post(
        "/api/v1/records", body.replace(b"\n", b""), content_type="application/x-ndjson"
    )
    assert stripped.status_code in (207, 400)

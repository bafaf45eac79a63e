"""Exports: GET /api/v1/export streams; POST /api/v1/exports runs a worker job; the
exports page lists the jobs. Each format is read back with its own reader and compared with the
records the filters select."""

from __future__ import annotations

import csv
import io
import json
import os
from datetime import UTC, datetime, timedelta

import pyarrow.parquet as pq
import pytest
import requests
from django.contrib.auth.models import User
from django.db import connection
from django.http import StreamingHttpResponse
from django.utils import timezone

import workers.tasks  # noqa: F401  (registers the tasks, as the worker's autodiscovery does)
from config.celery import app
from records.contract.filters import filter_records, parse_filters
from records.formats.record_export import (
    COLUMNS,
    FORMULA_TRIGGERS,
    counting,
    export_rows,
    export_rows_paged,
    neutralise,
    parquet_chunks,
    usd_text,
)
from records.models import Membership, Record
from tests.support import read_data
from tests.support.factories import record
from tests.support.live import product, run_export_job, task_received
from tests.support.read_data import at, post_records
from tests.support.services import need_service
from workers import export_jobs, export_requests
from workers.models import ExportJob

pytestmark = pytest.mark.both_dbs


@pytest.fixture
def loaded(alice, bob):
    read_data.load(alice, bob)
    return alice


@pytest.fixture
def export_dir(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    return tmp_path / "exports"


def stream(client, **params) -> bytes:
    response = client.get("/api/v1/export", params)
    assert response.status_code == 200, getattr(response, "content", b"")
    assert isinstance(response, StreamingHttpResponse)
    return b"".join(response.streaming_content)


def selected(project, params: dict) -> list[Record]:
    """What the filters must select, oldest first (the filter tests pin filter_records down)."""
    queryset = filter_records(Record.objects.filter(project=project), parse_filters(params))
    return list(queryset.order_by("ts", "id"))


def utc(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")


def csv_cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return utc(value)
    return str(value)


FILTERS = [{}, {"agent": "support-bot,code-reviewer", "has": "swap,fallback,error"}]


# --- each format read back -------------------------------------------------------------------


@pytest.mark.parametrize("params", FILTERS)
def test_it_exports_jsonl_as_the_records_api_shows_them(loaded, params):
    client = loaded.client(loaded.read_key)
    lines = stream(client, format="jsonl", **params).decode().splitlines()
    api = client.get("/api/v1/records", {**params, "limit": 1000}).json()["results"]
    assert [json.loads(line) for line in lines] == api
    assert len(lines) == len(selected(loaded.project, params)) > 0


@pytest.mark.parametrize("params", FILTERS)
def test_it_exports_csv_with_one_column_per_field(loaded, params):
    text = stream(loaded.client(loaded.read_key), format="csv", **params).decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    expected = selected(loaded.project, params)
    assert len(rows) == len(expected) > 0
    for row, rec in zip(rows, expected, strict=True):
        assert list(row) == list(COLUMNS)
        for column in COLUMNS[:-4]:
            value = rec.record_key if column == "id" else getattr(rec, column)
            assert row[column] == csv_cell(value), column
        assert row["cost_source"] == (rec.cost_source or "")
        assert row["cost_usd"] == usd_text(rec.cost_nano)
        assert json.loads(row["data"]) == rec.data
        assert json.loads(row["derived"]) == rec.derived


@pytest.mark.parametrize("params", FILTERS)
def test_it_exports_parquet_with_typed_columns(loaded, params):
    content = stream(loaded.client(loaded.read_key), format="parquet", **params)
    table = pq.read_table(io.BytesIO(content))
    assert table.schema.field("ts").type.unit == "us" and str(table.schema.field("ts").type.tz)
    assert str(table.schema.field("is_swap").type) == "bool"
    assert str(table.schema.field("iteration").type) == "int32"
    assert str(table.schema.field("latency_ms").type) == "double"
    assert str(table.schema.field("tokens_in").type) == "int64"
    expected = selected(loaded.project, params)
    got = table.to_pylist()
    assert len(got) == len(expected) > 0
    for row, rec in zip(got, expected, strict=True):
        assert row["id"] == rec.record_key
        for column in COLUMNS[1:-4]:
            assert row[column] == getattr(rec, column), column
        assert row["cost_source"] == rec.cost_source
        assert row["cost_usd"] == (None if rec.cost_nano is None else rec.cost_nano / 1e9)
        assert json.loads(row["data"]) == rec.data
        assert json.loads(row["derived"]) == rec.derived


def priced_records(alice) -> dict[str, dict]:
    """A call at the project's own price, one of a model no price is known for, a turn that
    reported its cost and a selection without usage."""
    from decimal import Decimal

    from records.models import PriceOverride

    PriceOverride.objects.create(
        project=alice.project,
        model="house-model",
        effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        input_per_mtok=Decimal(1),
        output_per_mtok=Decimal(2),
    )
    posted = {
        # (5000 + 4000 cached) input at $1 and 300 output at $2 per million tokens: $0.0096.
        "override": record("model_call", data={"model": "house-model"}),
        "unknown": record("model_call", data={"model": "no-such-model-7b", "provider": "acme"}),
        "reported": record("turn", data={"totalCost": 0.0123}),
        "none": record("model_selection"),
    }
    post_records(alice.client(), list(posted.values()))
    return {name: r["id"] for name, r in posted.items()}


def test_it_exports_each_records_cost_in_every_format(alice):
    ids = priced_records(alice)
    client = alice.client(alice.read_key)
    text = stream(client, format="csv").decode()
    rows = {r["id"]: r for r in csv.DictReader(io.StringIO(text))}
    got = {name: (rows[i]["cost_usd"], rows[i]["cost_source"]) for name, i in ids.items()}
    assert got == {
        "override": ("0.0096", "override"),
        "unknown": ("", "unknown"),
        "reported": ("0.0123", "reported"),
        "none": ("", ""),
    }
    table = pq.read_table(io.BytesIO(stream(client, format="parquet")))
    assert str(table.schema.field("cost_usd").type) == "double"
    rows = {r["id"]: r for r in table.to_pylist()}
    got = {name: (rows[i]["cost_usd"], rows[i]["cost_source"]) for name, i in ids.items()}
    assert got == {
        "override": (0.0096, "override"),
        "unknown": (None, "unknown"),
        "reported": (0.0123, "reported"),
        "none": (None, None),
    }
    lines = {r["id"]: r for r in map(json.loads, stream(client, format="jsonl").splitlines())}
    costs = {name: lines[i]["derived"].get("cost") for name, i in ids.items()}
    assert costs == {
        "override": {"usd": 0.0096, "source": "override"},
        "unknown": {
            "usd": None,
            "source": None,
            "reason": "no price known for model 'no-such-model-7b'",
        },
        "reported": {"usd": 0.0123, "source": "reported"},
        "none": None,
    }
    # The rest of `derived` is kept beside the cost.
    assert lines[ids["reported"]]["derived"]["decision"]


def test_it_writes_cost_as_exact_decimal_text():
    assert [usd_text(n) for n in (None, 0, 1, 12_345_678, 2_500_000_000, -30)] == [
        "", "0", "0.000000001", "0.012345678", "2.5", "-0.00000003"
    ]  # fmt: skip


def test_it_writes_parquet_in_row_groups(loaded):
    rows = export_rows(Record.objects.filter(project=loaded.project))
    content = b"".join(parquet_chunks(rows, row_group=3))
    parquet = pq.ParquetFile(io.BytesIO(content))
    assert parquet.metadata.num_row_groups == 3  # 8 rows: 3 + 3 + 2
    assert parquet.metadata.num_rows == 8


def test_it_names_the_file_and_its_type(loaded):
    response = loaded.client(loaded.read_key).get("/api/v1/export", {"format": "csv"})
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"].startswith('attachment; filename="acme-records-')
    assert response["Content-Disposition"].endswith('.csv"')
    jsonl = loaded.client(loaded.read_key).get("/api/v1/export", {"format": "jsonl"})
    assert jsonl["Content-Type"] == "application/x-ndjson"


@pytest.mark.parametrize("fmt", ["", "xlsx", "json"])
def test_it_answers_400_for_an_unknown_format(alice, fmt):
    response = alice.client(alice.read_key).get("/api/v1/export", {"format": fmt})
    assert response.status_code == 400
    assert list(response.json()) == ["format"]


def test_it_streams_in_batches(alice):
    post_records(alice.client(), [record() for _ in range(2500)])
    response = alice.client(alice.read_key).get("/api/v1/export", {"format": "jsonl"})
    chunks = list(response.streaming_content)
    assert len(chunks) == 3  # 1,000 rows a chunk
    assert sum(chunk.count(b"\n") for chunk in chunks) == 2500


def test_it_reads_from_a_server_side_cursor_on_postgresql(postgres, alice):
    post_records(alice.client(), [record() for _ in range(2500)])
    response = alice.client(alice.read_key).get("/api/v1/export", {"format": "csv"})
    chunks = iter(response.streaming_content)
    next(chunks), next(chunks)  # the header and the first rows are out, the rest in the database
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, is_holdable FROM pg_cursors")
        cursors = cursor.fetchall()
    assert [(name.startswith("_django_curs_"), hold) for name, hold in cursors] == [(True, False)]
    assert sum(chunk.count(b"\n") for chunk in chunks) > 0


# --- formulas and other projects -----------------------------------------------------------------

FORMULAS = {
    "agent": '=HYPERLINK("http://evil.example","click")',
    "run_id": "+1+1",
    "session_id": "-2+3",
    "parent_run_id": "@SUM(A1:A9)",
    "release": "=2+2",
}


def test_it_neutralises_formulas_in_csv_cells(alice):
    tool = "=cmd|' /C calc'!A0"
    pick = record(
        "tool_choice.pick",
        data={
            "offered": [tool, "grep"],
            "ranked": [{"name": tool, "score": 0.9}],
            "chosen": tool,
            "served": [tool, "\tTAB"],
            "classifier": {"name": "x", "model": "\rcarriage"},
        },
        **FORMULAS,
    )
    verdict = record("classifier.verdict", data={"toolName": "@evil", "model": "-model"})
    post_records(alice.client(), [pick, verdict])
    text = stream(alice.client(alice.read_key), format="csv").decode()
    rows = list(csv.reader(io.StringIO(text)))[1:]
    for row in rows:
        for cell in row:
            assert not cell.startswith(FORMULA_TRIGGERS), cell
    by_id = {row[0]: dict(zip(COLUMNS, row, strict=True)) for row in rows}
    got = by_id[pick["id"]]
    for column, value in FORMULAS.items():
        assert got[column] == "'" + value
    assert got["model"] == "'\rcarriage"
    # The tool names live in `data`, a JSON cell a spreadsheet shows as text: kept exactly.
    assert json.loads(got["data"]) == pick["data"]
    assert by_id[verdict["id"]]["model"] == "'-model"
    assert json.loads(by_id[verdict["id"]]["data"])["toolName"] == "@evil"


def test_it_keeps_values_as_posted_in_jsonl_and_parquet(alice):
    post_records(alice.client(), [record(**FORMULAS)])
    client = alice.client(alice.read_key)
    (line,) = stream(client, format="jsonl").decode().splitlines()
    (row,) = pq.read_table(io.BytesIO(stream(client, format="parquet"))).to_pylist()
    for column, value in FORMULAS.items():
        assert json.loads(line)[column] == value and row[column] == value


@pytest.mark.parametrize("char", FORMULA_TRIGGERS)
def test_it_neutralises_each_formula_trigger(char):
    assert neutralise(f"{char}x") == f"'{char}x"


@pytest.mark.parametrize("char", FORMULA_TRIGGERS)
def test_it_neutralises_each_trigger_in_the_stream_and_in_a_jobs_file(
    alice, export_dir, django_capture_on_commit_callbacks, char
):
    text = {"agent": f"{char}agent", "run_id": f"{char}run", "session_id": f"{char}session"}
    post_records(alice.client(), [record(**text)])
    client = alice.client(alice.read_key)
    job = start_job(alice, django_capture_on_commit_callbacks, format="csv")
    export_jobs.run_export(job["id"])
    download = client.get(client.get(f"/api/v1/exports/{job['id']}").json()["download_url"])
    for content in (stream(client, format="csv"), b"".join(download.streaming_content)):
        (row,) = csv.DictReader(io.StringIO(content.decode(), newline=""))
        assert {column: row[column] for column in text} == {
            column: "'" + value for column, value in text.items()
        }


@pytest.mark.parametrize("value", ["", "plain", "a=b", '{"x": "=1"}', "'=quoted"])
def test_it_leaves_other_cells_alone(value):
    assert neutralise(value) == value


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_it_exports_nothing_of_another_projects_run(alice, bob, fmt):
    post_records(bob.client(), [record(run_id="bobs-run") for _ in range(3)])
    post_records(alice.client(), [record(run_id="alices-run")])
    content = stream(alice.client(alice.read_key), format=fmt, run_id="bobs-run")
    if fmt == "csv":
        assert content.decode().splitlines() == [",".join(COLUMNS)]
    elif fmt == "jsonl":
        assert content == b""
    else:
        assert pq.read_table(io.BytesIO(content)).num_rows == 0


def test_it_refuses_an_export_without_the_read_scope(alice):
    assert (
        alice.client(alice.ingest_key).get("/api/v1/export", {"format": "csv"}).status_code == 403
    )


@pytest.mark.parametrize(
    "url,params,sqlite,postgresql",
    [
        # the key, the rows (PostgreSQL: plus the savepoint around the named cursor)
        ("/api/v1/export", {"format": "csv"}, 2, 4),
        ("/api/v1/export", {"format": "jsonl", "agent": "a,b", "has": "swap"}, 2, 4),
        # the key, the page of jobs
        ("/api/v1/exports", {}, 2, 2),
    ],
)
def test_it_exports_in_a_fixed_number_of_queries(
    alice, export_dir, django_assert_num_queries, url, params, sqlite, postgresql
):
    expected = postgresql if connection.vendor == "postgresql" else sqlite
    # On SQLite a key's first lookup in a minute marks its use apart (ApiKey.find_live): one
    # UPDATE, not counted.
    alice.client(alice.read_key).get("/api/v1/exports")
    for n in (3, 30):
        post_records(alice.client(), [record() for _ in range(n)])
        for _ in range(n // 3):
            export_requests.start_export(alice.project, "csv", {})
        with django_assert_num_queries(expected):
            response = alice.client(alice.read_key).get(url, params)
            if isinstance(response, StreamingHttpResponse):
                b"".join(response.streaming_content)
        assert response.status_code == 200


# --- export jobs -------------------------------------------------------------------------------


def start_job(persona, django_capture_on_commit_callbacks, **body) -> dict:
    with django_capture_on_commit_callbacks() as callbacks:
        response = persona.client(persona.read_key).post("/api/v1/exports", body, format="json")
    assert response.status_code == 201, response.content
    assert len(callbacks) == 1  # enqueued once the job is committed
    return response.json()


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_it_runs_an_export_job_to_a_file_like_the_stream(
    loaded, export_dir, django_capture_on_commit_callbacks, fmt
):
    params = {"agent": "support-bot,code-reviewer", "to": at(12)}
    job = start_job(loaded, django_capture_on_commit_callbacks, format=fmt, **params)
    assert job["status"] == "queued" and job["download_url"] is None and job["progress"] == 0
    assert job["filters"] == params

    export_jobs.run_export(job["id"])

    client = loaded.client(loaded.read_key)
    done = client.get(f"/api/v1/exports/{job['id']}").json()
    assert done["status"] == "done" and done["progress"] == 1.0
    assert done["rows"] == done["total_rows"] == 5
    assert done["download_url"].endswith(f"/api/v1/exports/{job['id']}/download")
    assert done["size_bytes"] > 0 and done["expires_at"] > done["finished_at"]
    download = client.get(done["download_url"])
    assert download.status_code == 200
    assert download["Content-Disposition"].startswith("attachment;")
    content = b"".join(download.streaming_content)
    streamed = stream(client, format=fmt, **params)
    if fmt == "parquet":
        assert pq.read_table(io.BytesIO(content)).equals(pq.read_table(io.BytesIO(streamed)))
    else:
        assert content == streamed
    assert sorted(p.name for p in export_dir.iterdir()) == [f"export-{job['id']}.{fmt}"]


def test_it_reads_the_same_rows_in_pages_as_from_the_cursor(alice):
    # Several records share a ts: the pages must break ties by id like the cursor.
    post_records(alice.client(), [record(ts=at(i // 4)) for i in range(23)])
    queryset = Record.objects.filter(project=alice.project)
    assert list(export_rows_paged(queryset, page=5)) == list(export_rows(queryset))
    assert list(export_rows_paged(queryset, page=23)) == list(export_rows(queryset))


def test_it_reports_progress_every_n_rows_and_at_the_end():
    reports: list[int] = []
    assert list(counting(iter(range(7)), 3, reports.append)) == list(range(7))
    assert reports == [3, 6, 7]


def test_it_runs_a_job_once(loaded, export_dir, django_capture_on_commit_callbacks):
    job = start_job(loaded, django_capture_on_commit_callbacks, format="csv")
    assert export_jobs.run_export(job["id"]).status == ExportJob.Status.DONE
    assert export_jobs.run_export(job["id"]) is None  # a redelivered task finds it done
    assert export_jobs.run_export(999_999) is None


def test_it_fails_a_job_whose_export_breaks_and_leaves_no_file(alice, export_dir):
    job = ExportJob.objects.create(project=alice.project, format="csv", filters={"kind": "nope"})
    export_jobs.run_export(job.pk)
    job.refresh_from_db()
    assert job.status == ExportJob.Status.FAILED and "nope" in job.error
    assert list(export_dir.iterdir()) == []
    response = alice.client(alice.read_key).get(f"/api/v1/exports/{job.pk}/download")
    assert response.status_code == 404


def test_it_refuses_a_job_with_a_bad_format(alice):
    response = alice.client(alice.read_key).post("/api/v1/exports", {"format": "xls"}, "json")
    assert response.status_code == 400 and list(response.json()) == ["format"]
    assert not ExportJob.objects.exists()


def test_it_refuses_a_body_that_is_not_an_object(alice):
    response = alice.client(alice.read_key).post("/api/v1/exports", ["csv"], format="json")
    assert response.status_code == 400
    assert not ExportJob.objects.exists()


def test_it_takes_a_form_body_too(alice, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks():
        response = alice.client(alice.read_key).post(
            "/api/v1/exports", {"format": "csv", "agent": "support-bot", "has": ["swap", "error"]}
        )
    assert response.status_code == 201
    assert response.json()["filters"] == {"agent": "support-bot", "has": "swap,error"}


def test_it_takes_a_json_list_as_a_comma_list(alice, django_capture_on_commit_callbacks):
    job = start_job(
        alice, django_capture_on_commit_callbacks, format="csv", agent=["a", "b"], has=["swap"]
    )
    assert job["filters"] == {"agent": "a,b", "has": "swap"}


def test_it_hides_another_projects_job(loaded, bob, export_dir, django_capture_on_commit_callbacks):
    job = start_job(bob, django_capture_on_commit_callbacks, format="csv")
    export_jobs.run_export(job["id"])
    client = loaded.client(loaded.read_key)
    assert client.get(f"/api/v1/exports/{job['id']}").status_code == 404
    assert client.get(f"/api/v1/exports/{job['id']}/download").status_code == 404
    assert client.get("/api/v1/exports").json()["results"] == []
    mine = bob.client(bob.read_key).get("/api/v1/exports").json()["results"]
    assert [j["id"] for j in mine] == [job["id"]]


def test_it_checks_access_on_the_download(loaded, export_dir, django_capture_on_commit_callbacks):
    job = start_job(loaded, django_capture_on_commit_callbacks, format="csv")
    export_jobs.run_export(job["id"])
    url = f"/api/v1/exports/{job['id']}/download"
    assert loaded.client("dbk_not-a-key").get(url).status_code == 401
    assert loaded.client(loaded.ingest_key).get(url).status_code == 403
    user = User.objects.create_user("carol")
    Membership.objects.create(user=user, project=loaded.project)
    from rest_framework.test import APIClient

    session = APIClient()
    session.force_login(user)
    assert session.get(url).status_code == 200
    outsider = APIClient()
    outsider.force_login(User.objects.create_user("mallory"))
    assert outsider.get(url).status_code == 404


# --- expiry --------------------------------------------------------------------------------------


def test_it_expires_old_files_and_fails_lost_jobs(
    loaded, export_dir, django_capture_on_commit_callbacks
):
    old = start_job(loaded, django_capture_on_commit_callbacks, format="csv")
    fresh = start_job(loaded, django_capture_on_commit_callbacks, format="jsonl")
    export_jobs.run_export(old["id"])
    export_jobs.run_export(fresh["id"])
    ExportJob.objects.filter(pk=old["id"]).update(expires_at=timezone.now() - timedelta(1))
    lost = ExportJob.objects.create(
        project=loaded.project,
        format="csv",
        status=ExportJob.Status.RUNNING,
        file_name="export-lost.csv",
        updated_at=timezone.now() - timedelta(hours=1),
    )
    never = ExportJob.objects.create(project=loaded.project, format="csv")
    ExportJob.objects.filter(pk=never.pk).update(created_at=timezone.now() - timedelta(days=1))
    orphan = export_dir / "export-lost.csv.part"
    orphan.write_bytes(b"half a file")
    stale = (timezone.now() - timedelta(hours=2)).timestamp()
    os.utime(orphan, (stale, stale))

    assert export_jobs.expire_exports() == 2  # the old file and the orphaned part

    client = loaded.client(loaded.read_key)
    assert client.get(f"/api/v1/exports/{old['id']}").json()["status"] == "expired"
    assert client.get(f"/api/v1/exports/{old['id']}/download").status_code == 410
    assert client.get(f"/api/v1/exports/{fresh['id']}/download").status_code == 200
    assert sorted(p.name for p in export_dir.iterdir()) == [f"export-{fresh['id']}.jsonl"]
    for job in (lost, never):
        job.refresh_from_db()
        assert job.status == ExportJob.Status.FAILED and job.error


def test_beat_expires_exports():
    entry = app.conf.beat_schedule["expire-exports"]
    assert entry["task"] == "workers.tasks.expire_exports_task"
    assert entry["task"] in app.tasks and "workers.tasks.export_task" in app.tasks
    assert entry["schedule"] <= 3600


# --- the exports page ---------------------------------------------------------------------------


@pytest.fixture
def carol(alice):
    user = User.objects.create_user("carol", password="pw-carol-1")
    Membership.objects.create(user=user, project=alice.project)
    return user


def test_it_asks_for_a_login_on_the_exports_page(db, client):
    response = client.get("/exports/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_it_lists_the_jobs_of_the_operators_projects(client, carol, alice, bob, export_dir):
    mine = export_requests.start_export(
        alice.project, "csv", {"agent": "<script>alert(1)</script>"}
    )
    export_jobs.run_export(mine.pk)
    theirs = export_requests.start_export(bob.project, "jsonl", {})
    client.force_login(carol)
    response = client.get("/exports/")
    html = response.content.decode()
    assert response.status_code == 200
    assert f"/api/v1/exports/{mine.pk}/download" in html
    assert f"<td>{theirs.pk}</td>" not in html and "globex" not in html
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html


def test_it_starts_an_export_from_the_page(
    client, carol, alice, django_capture_on_commit_callbacks
):
    client.force_login(carol)
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post(
            "/exports/",
            {
                "project": "acme",
                "format": "parquet",
                "from": at(0),
                "agent": "support-bot",
                "kind": "",
                "has": ["swap", "error"],
            },
        )
    assert response.status_code == 302 and response["Location"] == "/exports/"
    assert len(callbacks) == 1
    job = ExportJob.objects.get()
    assert job.project == alice.project and job.format == "parquet"
    assert job.filters == {"from": at(0), "agent": "support-bot", "has": "swap,error"}
    assert job.created_by == carol


def test_it_shows_a_malformed_filter_on_the_page(client, carol, alice):
    client.force_login(carol)
    response = client.post("/exports/", {"project": "acme", "format": "csv", "from": "soon"})
    assert response.status_code == 400
    assert "from:" in response.content.decode()
    assert not ExportJob.objects.exists()


def test_it_refuses_to_export_a_project_the_operator_is_not_in(client, carol, bob):
    client.force_login(carol)
    response = client.post("/exports/", {"project": "globex", "format": "csv"})
    assert response.status_code == 404
    assert not ExportJob.objects.exists()


def test_it_prefills_the_form_from_the_query_string(client, carol, alice):
    client.force_login(carol)
    html = client.get("/exports/", {"run_id": "run-9", "has": "fallback"}).content.decode()
    assert 'name="run_id" value="run-9"' in html
    assert 'value="fallback" checked' in html


def test_it_refreshes_the_jobs_table_while_a_job_runs(client, carol, alice, export_dir):
    job = export_requests.start_export(alice.project, "csv", {})
    client.force_login(carol)
    partial = client.get("/exports/", HTTP_HX_REQUEST="true").content.decode()
    assert '<div id="export-jobs"' in partial
    assert 'hx-trigger="every 3s"' in partial and "<form" not in partial
    export_jobs.run_export(job.pk)
    done = client.get("/exports/", HTTP_HX_REQUEST="true").content.decode()
    assert "hx-trigger" not in done and f"/api/v1/exports/{job.pk}/download" in done


def test_it_draws_the_exports_page_in_a_fixed_number_of_queries(
    client, carol, alice, django_assert_num_queries
):
    client.force_login(carol)
    for n in (1, 12):
        for _ in range(n):
            export_requests.start_export(alice.project, "csv", {})
        # session, user, projects, jobs
        with django_assert_num_queries(4):
            assert client.get("/exports/").status_code == 200


# --- a real worker -------------------------------------------------------------------------------


def test_a_real_worker_runs_an_export_job(tmp_path, transactional_db):
    from records.models import ApiKey, Project

    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    need_service(_redis_up(redis_url), f"Redis at {redis_url}")
    project = Project.objects.create(name="acme")
    ingest = ApiKey.issue(project, ApiKey.Scope.INGEST)[1]
    read = {"Authorization": f"Bearer {ApiKey.issue(project, ApiKey.Scope.READ)[1]}"}
    with product(tmp_path, redis_url) as base:
        records = [record(run_id=f"run-{i % 3}") for i in range(120)]
        posted = requests.post(
            f"{base}/api/v1/records",
            json={"records": records},
            headers={"Authorization": f"Bearer {ingest}"},
            timeout=30,
        )
        assert posted.json()["accepted"] == 120
        finished = run_export_job(base, read, {"format": "jsonl", "run_id": "run-1"})
        assert finished["status"] == "done", finished
        assert finished["rows"] == 40
        download = requests.get(finished["download_url"], headers=read, timeout=30)
        ids = [json.loads(line)["id"] for line in download.text.splitlines()]
        assert sorted(ids) == sorted(r["id"] for r in records if r["run_id"] == "run-1")
        assert requests.get(finished["download_url"], timeout=10).status_code == 401
        assert (tmp_path / "exports" / f"export-{finished['id']}.jsonl").exists()
    # On the jobs worker (config.queues routes exports there), never beside the catch-up.
    assert task_received(tmp_path / "jobs-worker.log", "export_task")
    assert not task_received(tmp_path / "worker.log", "export_task")


def _redis_up(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False

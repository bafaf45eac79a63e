"""The one filter vocabulary: each parameter alone and combined, and each malformed
value, on the functions and on every endpoint that takes it (records, runs, exports)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from records.contract.filters import (
    FilterError,
    Filters,
    filter_records,
    filter_runs,
    parse_filters,
)
from records.models import Record, Run
from tests.support import read_data
from tests.support.module_data import module_transaction
from tests.support.read_data import MALFORMED, RECORD_CASES, RUN_CASES, at
from tests.support.services import Persona

pytestmark = pytest.mark.both_dbs


@pytest.fixture(scope="module")
def module_personas(django_db_setup, django_db_blocker, tmp_path_factory):
    """alice's and bob's projects with the read set loaded, once for the module's hundreds of
    cases (tests/support/module_data.py)."""
    with module_transaction(django_db_blocker, tmp_path_factory.mktemp("filters")):
        alice, bob = Persona("acme"), Persona("globex")
        read_data.load(alice, bob)
        yield alice


@pytest.fixture
def alice(module_personas, db):
    return module_personas


@pytest.fixture
def loaded(alice):
    return alice


def _case_id(case) -> str:
    params = case[0]
    return "&".join(f"{k}={v[:30]}" for k, v in params.items()) or "no-filter"


# --- parse_filters keeps its behaviour -------------------------------------------------------


def test_it_parses_every_parameter():
    filters = parse_filters(
        {
            "from": "2026-11-20T10:00:00+01:00",
            "to": "2026-11-20T10:00:00Z",
            "agent": "a, b",
            "release": "v1.2.0,sha:9f2c",
            "model": "m",
            "kind": "turn,notice",
            "run_id": "r",
            "session_id": "s",
            "has": "swap,contract_break",
        }
    )
    assert filters == Filters(
        start=datetime(2026, 11, 20, 9, 0, tzinfo=UTC),
        end=datetime(2026, 11, 20, 10, 0, tzinfo=UTC),
        agents=["a", "b"],
        releases=["v1.2.0", "sha:9f2c"],
        models=["m"],
        kinds=["turn", "notice"],
        run_ids=["r"],
        session_ids=["s"],
        has=["swap", "contract_break"],
    )


@pytest.mark.parametrize("param,value", MALFORMED)
def test_it_names_the_parameter_of_a_malformed_value(param, value):
    with pytest.raises(FilterError) as info:
        parse_filters({param: value})
    assert info.value.param == param and info.value.message


def test_it_refuses_a_range_that_ends_before_it_starts():
    with pytest.raises(FilterError) as info:
        parse_filters({"from": at(5), "to": at(5)})
    assert info.value.param == "to"


# --- applied to querysets --------------------------------------------------------------------


@pytest.mark.parametrize("params,expected", RECORD_CASES, ids=[_case_id(c) for c in RECORD_CASES])
def test_it_filters_records(loaded, params, expected):
    queryset = filter_records(Record.objects.filter(project=loaded.project), parse_filters(params))
    assert list(queryset.order_by("ts").values_list("record_key", flat=True)) == expected


@pytest.mark.parametrize("params,expected", RUN_CASES, ids=[_case_id(c) for c in RUN_CASES])
def test_it_filters_runs(loaded, params, expected):
    queryset = filter_runs(Run.objects.filter(project=loaded.project), parse_filters(params))
    assert list(queryset.order_by("-id").values_list("run_id", flat=True)) == expected


# --- on the API --------------------------------------------------------------------------------


@pytest.mark.parametrize("params,expected", RECORD_CASES, ids=[_case_id(c) for c in RECORD_CASES])
def test_it_filters_the_records_list(loaded, params, expected):
    response = loaded.client(loaded.read_key).get("/api/v1/records", params)
    assert response.status_code == 200
    assert [r["id"] for r in response.json()["results"]] == expected


@pytest.mark.parametrize("params,expected", RUN_CASES, ids=[_case_id(c) for c in RUN_CASES])
def test_it_filters_the_runs_list(loaded, params, expected):
    response = loaded.client(loaded.read_key).get("/api/v1/runs", params)
    assert response.status_code == 200
    assert [r["run_id"] for r in response.json()["results"]] == expected


@pytest.mark.parametrize("params,expected", RECORD_CASES, ids=[_case_id(c) for c in RECORD_CASES])
def test_it_filters_the_streamed_export(loaded, params, expected):
    response = loaded.client(loaded.read_key).get("/api/v1/export", {**params, "format": "jsonl"})
    assert response.status_code == 200
    lines = b"".join(response.streaming_content).decode().splitlines()
    assert [json.loads(line)["id"] for line in lines] == expected


@pytest.mark.parametrize("params,expected", RECORD_CASES, ids=[_case_id(c) for c in RECORD_CASES])
def test_it_keeps_the_filters_of_an_export_job(loaded, settings, tmp_path, params, expected):
    from workers.export_jobs import run_export

    settings.VAR_DIR = tmp_path  # the job's file goes under VAR_DIR/exports
    response = loaded.client(loaded.read_key).post(
        "/api/v1/exports", {**params, "format": "jsonl"}, format="json"
    )
    assert response.status_code == 201, response.content
    job = run_export(response.json()["id"])
    download = loaded.client(loaded.read_key).get(f"/api/v1/exports/{job.pk}/download")
    lines = b"".join(download.streaming_content).decode().splitlines()
    assert [json.loads(line)["id"] for line in lines] == expected
    assert job.rows == len(expected)


ENDPOINTS = [
    ("get", "/api/v1/records", {}),
    ("get", "/api/v1/runs", {}),
    ("get", "/api/v1/export", {"format": "csv"}),
    ("post", "/api/v1/exports", {"format": "csv"}),
]


@pytest.mark.parametrize("method,url,extra", ENDPOINTS, ids=[e[1] for e in ENDPOINTS])
@pytest.mark.parametrize("param,value", MALFORMED, ids=[f"{p}-{v[:12]}" for p, v in MALFORMED])
def test_it_answers_400_naming_the_malformed_parameter(alice, method, url, extra, param, value):
    client = alice.client(alice.read_key)
    if method == "get":
        response = client.get(url, {**extra, param: value})
    else:
        response = client.post(url, {**extra, param: value}, format="json")
    assert response.status_code == 400
    body = response.json()
    assert list(body) == [param]
    assert isinstance(body[param], list) and body[param][0]


@pytest.mark.parametrize("method,url,extra", ENDPOINTS, ids=[e[1] for e in ENDPOINTS])
def test_it_answers_400_for_a_range_ending_before_it_starts(alice, method, url, extra):
    client = alice.client(alice.read_key)
    params = {**extra, "from": at(5), "to": at(1)}
    response = client.get(url, params) if method == "get" else client.post(url, params, "json")
    assert response.status_code == 400
    assert list(response.json()) == ["to"]


def test_it_lists_the_allowed_values_when_a_kind_is_unknown(alice):
    response = alice.client(alice.read_key).get("/api/v1/records", {"kind": "turns"})
    assert response.status_code == 400
    message = response.json()["kind"][0]
    assert "'turns'" in message and "tool_choice.pick" in message

"""A crawler over every page's URL pattern (dashboard/urls.py), logged in as an operator, with
hostile path segments, query parameters and form bodies: no answer is a 5xx.

The patterns are read from the URL configuration, so a page added later is crawled too.
"""

from __future__ import annotations

import base64
import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import URLPattern

from alerts.models import Channel, Rule
from dashboard.urls import urlpatterns
from records.models import Membership
from tests.support.factories import record

# Path segments by converter; the first of each is filled in with a real object's.
HOSTILE_TEXT = [
    "a%00b",
    "%ff%fe",
    "%ED%B0%80",  # the UTF-8 bytes of a lone surrogate
    "..%2F..%2Fetc",
    "x" * 300,
    "%3Cscript%3Ealert(1)%3C%2Fscript%3E",
    "%F0%9F%99%82",
    "%20",
]
HOSTILE_INT = ["0", "99999999999999999999999"]


def _cursor(*values) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(values)).encode()).decode().rstrip("=")


# Query strings, percent-encoded as a client would send them.
HOSTILE_QUERIES = [
    "from=9999-12-31T23%3A59%3A59-23%3A59",
    "to=0001-01-01T00%3A00%3A00%2B23%3A59",
    "to=0001-01-01T00%3A00%3A00Z&from=0001-01-01T00%3A00%3A00Z",
    "agent=a%00b",
    "model=%ED%B0%80&kind=nope&has=swap,nope",
    "run_id=" + "x" * 300,
    "agent=" + ",".join(["a"] * 60),
    "sort=-nope&after=%21%21%21",
    f"sort=first_ts&after={_cursor('9999-12-31T23:59:59-23:59', 1)}",
    f"sort=record_count&after={_cursor(2**80, -1)}",
    "page=%C2%B2",
    "page=99999999999999999999999",
    "period=%ED%B0%80",
    "project=nope",
    "project=%00",
    "q=%25&state=nope&before=%C2%B2",
    "rule=%C2%B2&group=%ED%B0%80&reason=x",
    "format=xls&has=swap&has=%00",
    "&&&=&=%=",
]
HOSTILE_FORMS = [
    {"project": "nope", "next": "javascript:alert(1)"},
    {"project": "acme", "next": "//evil.example/"},
    {"minutes": "²", "paused": "x"},
    {"minutes": "99999999999999999999"},
    {"name": "a\x00b", "url": "http://[2002:7f00:1::]/", "kind": "webhook"},
    {"name": "x", "kind": "email", "addresses": "a@\x00.com"},
    {"name": "r", "metric": "nope", "threshold": "nan", "window_minutes": "-1"},
    {"format": "csv", "from": "9999-12-31T23:59:59-23:59", "project": "acme"},
    {"format": "csv", "agent": "a\x00b", "project": "acme"},
    {"preview": "1", "metric": "pick_error_rate", "threshold": "1e400"},
]


@pytest.fixture
def crawler(alice) -> tuple[Client, dict[str, str]]:
    """alice logged in, a member of `acme` with a run, a rule and a channel."""
    client = alice.client()
    posted = [record("tool_choice.pick", run_id="run-a/b"), record("model_call", run_id="run-a/b")]
    assert client.post("/api/v1/records", {"records": posted}, format="json").status_code == 200
    rule = Rule.objects.create(
        project=alice.project, name="r", metric="pick_error_rate", comparator="gt", threshold=0.1
    )
    channel = Channel.objects.create(
        project=alice.project, name="c", kind="email", addresses=["a@example.com"]
    )
    user = get_user_model().objects.create_user("alice")
    Membership.objects.create(user=user, project=alice.project, role="admin")
    browser = Client()
    browser.force_login(user)
    real = {"run_id": "run-a/b", "iteration": "0", "rule_id": str(rule.pk)}
    real["channel_id"] = str(channel.pk)
    return browser, real


_CONVERTER = re.compile(r"<(?:(\w+):)?(\w+)>")


def _paths(pattern: URLPattern, real: dict[str, str]) -> list[str]:
    """The pattern with real values, then with each hostile value in each of its segments."""
    route = str(pattern.pattern)
    names = [(kind or "str", name) for kind, name in _CONVERTER.findall(route)]

    def fill(values: dict[str, str]) -> str:
        return "/" + _CONVERTER.sub(lambda m: values[m.group(2)], route)

    base = {name: real.get(name, "1") for _, name in names}
    paths = [fill(base)]
    for kind, name in names:
        for value in HOSTILE_INT if kind == "int" else HOSTILE_TEXT:
            paths.append(fill({**base, name: value}))
    return paths


def test_every_page_pattern_is_crawled_with_every_hostile_value():
    paths = [path for pattern in urlpatterns for path in _paths(pattern, {})]
    queries = len(urlpatterns) * len(HOSTILE_QUERIES)
    assert len(paths) + queries > 300  # every pattern, every hostile value


# One test a pattern, each with its own objects, so that the crawl spreads over the test workers
# and a form that deletes the rule or channel of one pattern's paths leaves the others theirs.
@pytest.mark.parametrize("pattern", urlpatterns, ids=lambda pattern: pattern.name or "")
def test_no_page_answers_a_5xx_to_hostile_paths_parameters_or_forms(crawler, pattern):
    client, real = crawler
    failures = []
    paths = _paths(pattern, real)
    get_paths = [paths[0] + "?" + query for query in HOSTILE_QUERIES] + paths
    for path in get_paths:
        for headers in ({}, {"HX-Request": "true"}):
            status = client.get(path, headers=headers).status_code
            if status >= 500:
                failures.append(f"GET {path} {headers} -> {status}")
    # Forms last: they may delete the rule or the channel the paths above name.
    for form in HOSTILE_FORMS:
        status = client.post(paths[0], form).status_code
        if status >= 500:
            failures.append(f"POST {paths[0]} {form} -> {status}")
    assert failures == []

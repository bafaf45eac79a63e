"""The alerts pages and the preview: what an operator sees and can do in a browser.

alice is a member of `acme`, bob of `globex`. Pages load nothing from another host, and record
text (group names are agent and model names) is always escaped.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from alerts.firing import firing_alerts
from alerts.models import OVERALL_STATES, AlertEvent, AlertState, Channel, Rule
from alerts.preview import preview_rule
from dashboard.charts import alert_charts
from records import catchup
from records.models import Membership
from tests.support.alert_flow import make_rule
from tests.support.factories import record
from tests.support.receivers import Receiver

pytestmark = pytest.mark.both_dbs
EVIL = "<script>alert(1)</script>"


def login(persona, username: str) -> Client:
    user = get_user_model().objects.create_user(username)
    Membership.objects.create(user=user, project=persona.project, role="admin")
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def alice_page(alice) -> Client:
    return login(alice, "alice")


def firing(rule: Rule, group: str = "qwen3-8b", value: float = 2500.0) -> AlertState:
    now = timezone.now()
    return AlertState.objects.create(
        rule=rule, group=group, state="firing", severity="critical", since=now, value=value,
        count=20, updated_at=now,
    )  # fmt: skip


def external_urls(html: str) -> list[str]:
    return re.findall(r"""(?:src|href)=["']((?:https?:)?//[^"']*)""", html)


def this_minute():
    return timezone.now().replace(second=0, microsecond=0)


def post_picks(persona, minutes_ago: list[int], latency: float, model="qwen3-8b") -> None:
    """Three picks in each of the whole minutes `minutes_ago` before this one."""
    base = this_minute()
    records = [
        record(
            "tool_choice.pick",
            ts=(base - timedelta(minutes=m, seconds=-i)).isoformat(),
            data={"classifier": {"name": "c", "model": model}, "latencyMs": latency},
        )
        for m in minutes_ago
        for i in range(3)
    ]
    response = persona.client().post("/api/v1/records", {"records": records}, format="json")
    assert response.status_code == 200, response.content
    catchup.catch_up()


# --- the list ------------------------------------------------------------------------------------
def test_pages_need_a_login(alice):
    response = Client().get("/alerts/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_the_list_shows_each_rules_state_and_each_channels_health(alice, bob, alice_page):
    rule = make_rule(alice)
    firing(rule)
    make_rule(bob, name="bob's secret rule")
    Channel.objects.create(
        project=alice.project, name="pager", kind="email", addresses=["p@example.com"],
        disabled=True, consecutive_failures=10, last_error="SMTP 554 rejected",
    )  # fmt: skip
    page = alice_page.get("/alerts/").content.decode()
    assert "slow classifier" in page and "bob&#x27;s secret rule" not in page
    assert "state-firing" in page and "qwen3-8b" in page and "2,500 ms" in page
    assert "disabled</span> after 10 failures in a row" in page and "SMTP 554" in page
    assert ">Pause</button>" in page and ">Silence</button>" in page
    assert ">Send test</button>" in page
    assert external_urls(page) == []


def test_the_list_puts_firing_rules_first_filters_and_pages(alice, alice_page):
    for i in range(60):
        make_rule(alice, name=f"rule {i:02}")
    firing(Rule.objects.get(name="rule 42"))
    Rule.objects.filter(name="rule 07").update(paused=True)

    def names(url: str) -> list[str]:
        page = alice_page.get(url).content.decode()
        return re.findall(r'<td><a href="/alerts/\d+/">([^<]+)</a></td>', page)

    first = names("/alerts/")
    assert len(first) == 50 and first[:3] == ["rule 42", "rule 00", "rule 01"]
    second = names("/alerts/?page=2")
    assert len(second) == 10 and second[-1] == "rule 07"  # paused last
    assert sorted(first + second) == sorted(f"rule {i:02}" for i in range(60))
    assert names("/alerts/?state=firing") == ["rule 42"]
    assert names("/alerts/?state=paused") == ["rule 07"]
    assert names("/alerts/?q=rule+1") == [f"rule {i}" for i in range(10, 20)]
    # Never evaluated: "new" on the list and in its filter alike (Rule.overall_state).
    page = alice_page.get("/alerts/?q=rule&state=new").content.decode()
    assert "firing (1)" in page and "new (58)" in page and "paused (1)" in page
    assert "ok (0)" in page
    assert 'href="?q=rule&amp;state=new&amp;page=2"' in page  # the filters are kept
    # a button sends the operator back to the page and filters it came from
    assert 'name="next" value="/alerts/?q=rule&amp;state=new"' in page


def test_a_rules_overall_state_is_the_same_in_sql_and_in_python(alice):
    now = timezone.now()
    for state in ("firing", "nodata", "pending", "ok"):
        rule = make_rule(alice, name=state)
        Rule.objects.filter(pk=rule.pk).update(last_evaluated_at=now)
        AlertState.objects.create(rule=rule, group="g", state=state, since=now, updated_at=now)
    both = make_rule(alice, name="both")  # the worst of its groups
    Rule.objects.filter(pk=both.pk).update(last_evaluated_at=now)
    for group, state in (("a", "pending"), ("b", "nodata")):
        AlertState.objects.create(rule=both, group=group, state=state, since=now, updated_at=now)
    make_rule(alice, name="new")
    Rule.objects.filter(pk=firing(make_rule(alice, name="paused")).rule_id).update(paused=True)
    rules = Rule.objects.with_overall_rank().prefetch_related("states")
    sql = {r.name: OVERALL_STATES[r.overall_rank] for r in rules}
    python = {r.name: r.overall_state() for r in rules}
    assert sql == python
    assert python == {
        "firing": "firing", "nodata": "nodata", "pending": "pending", "ok": "ok",
        "both": "nodata", "new": "new", "paused": "paused",
    }  # fmt: skip


def test_the_list_costs_the_same_queries_however_many_rules(
    alice, alice_page, django_assert_max_num_queries
):
    # session, user, projects, state counts, page count, the page of rules, their states,
    # their channels, the channels
    for i in range(3):
        firing(make_rule(alice, name=f"rule {i}"))
    with django_assert_max_num_queries(10):
        assert alice_page.get("/alerts/").status_code == 200
    for i in range(3, 120):
        firing(make_rule(alice, name=f"rule {i}"))
    with django_assert_max_num_queries(10):
        assert alice_page.get("/alerts/").status_code == 200


def test_record_text_is_escaped_everywhere_it_shows(alice, alice_page):
    rule = make_rule(alice, name=EVIL)  # operators' text too: a rule's name
    firing(rule, group=EVIL)
    AlertEvent.objects.create(
        rule=rule, project=alice.project, group=EVIL, from_state="ok", to_state="firing",
        threshold=1000, comparator="gt", window_minutes=5, at=timezone.now(),
    )  # fmt: skip
    for url in ("/alerts/", f"/alerts/{rule.pk}/", "/alerts/events/", "/"):
        page = alice_page.get(url).content.decode()
        assert EVIL not in page, url
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page, url


# --- the rule form and its preview ------------------------------------------------------------
def test_the_preview_draws_the_metric_the_threshold_and_where_it_would_have_fired(alice):
    now = this_minute()
    post_picks(alice, [180, 179, 178], latency=2500.0)  # a burst three hours ago
    post_picks(alice, [60, 59], latency=3000.0)  # and one an hour ago
    post_picks(alice, [120, 30], latency=100.0)  # calm minutes in between
    rule = make_rule(alice, group_by="")
    preview = preview_rule(rule, now=now + timedelta(seconds=30))
    assert [(t, group) for t, group, _ in preview.fired] == [
        (now - timedelta(minutes=180), ""),
        (now - timedelta(minutes=60), ""),
    ]
    figure = alert_charts.alert_preview(preview, percent=False)
    traces = figure["data"]
    assert traces[0]["mode"] == "lines" and len(traces[0]["x"]) == 24 * 60
    assert max(v for v in traces[0]["y"] if v is not None) == pytest.approx(3000, rel=0.01)
    # Firing while a 5-minute window holds a hot minute: 3 + 4 minutes, then 2 + 4.
    would_fire = traces[-1]
    assert would_fire["name"] == "would fire" and len(would_fire["x"]) == 7 + 6
    shapes = figure["layout"]["shapes"]
    assert [shape["y0"] for shape in shapes] == [1000.0]


def test_the_preview_honours_the_for_duration_and_escapes_group_names(alice):
    post_picks(alice, [30], latency=5000.0, model=EVIL)  # one hot minute
    preview = preview_rule(make_rule(alice, for_minutes=10))
    assert preview.fired == []  # a 5-minute window never holds for 10 minutes
    assert preview.lines[0].label == EVIL  # the data as posted; the figure escapes it
    figure = alert_charts.alert_preview(preview, percent=False)
    assert figure["data"][0]["name"] == "&lt;script&gt;alert(1)&lt;/script&gt;"


def test_a_streak_rules_preview_shows_the_streak_hour_by_hour(alice):
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    broken = {"outcome": "parse_error", "verdict": None, "form": "missing"}

    def verdicts(hours_ago: int, model: str, n: int, **data) -> list[dict]:
        at = hour - timedelta(hours=hours_ago)
        return [
            record("classifier.verdict", ts=(at + timedelta(minutes=1 + i)).isoformat(),
                   data={"model": model, "seatModel": model, **data})
            for i in range(n)
        ]  # fmt: skip

    records = (
        verdicts(5, "qwen3-8b", 3, **broken)  # reaches 3 five hours ago...
        + verdicts(3, "qwen3-8b", 1)  # ...a ruling ends it...
        + verdicts(1, "qwen3-8b", 4, **broken)  # ...and it reaches 4 an hour ago
        + verdicts(2, "gpt-5-mini", 2, **broken)  # never reaches 3
        + verdicts(2, EVIL, 1, **broken)
    )
    response = alice.client().post("/api/v1/records", {"records": records}, format="json")
    assert response.status_code == 200, response.content
    catchup.catch_up()
    rule = make_rule(
        alice, metric="contract_broken_streak", comparator="gte", threshold=3, window_minutes=5
    )
    preview = preview_rule(rule)
    assert [(t, group, value) for t, group, value in preview.fired] == [
        (hour - timedelta(hours=5), "qwen3-8b", 3.0),
        (hour - timedelta(hours=1), "qwen3-8b", 4.0),
    ]
    figure = alert_charts.alert_preview(preview, percent=False)
    lines = {trace["name"]: trace for trace in figure["data"][:-1]}
    assert list(lines) == ["qwen3-8b", "gpt-5-mini", "&lt;script&gt;alert(1)&lt;/script&gt;"]
    qwen = lines["qwen3-8b"]
    assert len(qwen["x"]) == 24  # the streak at the end of each hour of the past day
    assert qwen["y"][-6:] == [3, 3, 0, 0, 4, 4]  # hours ending 4 h ago ... now
    would_fire = figure["data"][-1]
    assert would_fire["name"] == "would fire" and would_fire["y"] == [3, 3, 3, 4, 4]
    assert qwen["line"]["shape"] == "hv"  # a streak is read at the end of each hour
    # pinned to one model, only that model is drawn
    pinned = preview_rule(make_rule(alice, metric="contract_broken_streak", comparator="gte",
                                    threshold=3, window_minutes=5, model="gpt-5-mini"))  # fmt: skip
    assert [line.label for line in pinned.lines] == ["gpt-5-mini"]
    assert pinned.fired == []


def test_the_edit_page_shows_the_preview_chart_with_local_plotly(alice, alice_page):
    post_picks(alice, [2], latency=2500.0)
    rule = make_rule(alice)
    page = alice_page.get(f"/alerts/{rule.pk}/").content.decode()
    assert re.search(r'<script src="/static/vendor/plotly\.min\.[0-9a-f]{12}\.js" defer>', page)
    # No inline script (the Content-Security-Policy would refuse it): data rides in JSON.
    for tag in re.findall(r"<script[^>]*>", page):
        assert 'src="/static/' in tag or 'type="application/json"' in tag, tag
    assert "It would have fired 1 time" in page
    figure = re.search(
        r'<script id="alert-preview-figure" type="application/json">(.*?)</script>', page, re.S
    )
    assert json.loads(figure.group(1))["data"][0]["name"] == "qwen3-8b"
    assert external_urls(page) == []
    asset = alice_page.get("/static/vendor/plotly.min.js")
    assert asset.status_code == 200


def test_previewing_an_unsaved_rule_saves_nothing(alice, alice_page):
    post_picks(alice, [10], latency=2500.0)
    form = {
        "project": "acme",
        "name": "draft",
        "metric": "classifier_latency_p95",
        "comparator": "gt",
        "threshold": "1000",
        "window_minutes": "5",
        "min_records": "1",
        "for_minutes": "0",
        "no_data": "ok",
        "renotify_minutes": "0",
        "preview": "1",
    }
    response = alice_page.post("/alerts/new/", form)
    assert response.status_code == 200
    assert "It would have fired 1 time" in response.content.decode()
    assert not Rule.objects.exists()

    del form["preview"]
    response = alice_page.post("/alerts/new/", form)
    rule = Rule.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/alerts/{rule.pk}/"
    assert rule.project == alice.project and rule.name == "draft"


def test_the_form_explains_a_bad_rule(alice, alice_page):
    response = alice_page.post(
        "/alerts/new/",
        {
            "project": "acme",
            "name": "x",
            "metric": "first_pick_agreement",
            "group_by": "model",
            "comparator": "gt",
            "threshold": "0.5",
            "warning_threshold": "0.9",
            "window_minutes": "5",
            "min_records": "1",
            "for_minutes": "0",
            "no_data": "ok",
            "renotify_minutes": "0",
        },
    )
    page = response.content.decode()
    assert response.status_code == 200 and not Rule.objects.exists()
    assert "first_pick_agreement groups by: agent" in page
    assert "must be reached before the threshold" in page


def test_another_projects_rule_is_a_404(alice, bob, alice_page):
    theirs = make_rule(bob)
    assert alice_page.get(f"/alerts/{theirs.pk}/").status_code == 404
    assert alice_page.post(f"/alerts/{theirs.pk}/pause/", {"paused": "1"}).status_code == 404
    assert not Rule.objects.get(pk=theirs.pk).paused
    response = alice_page.post(
        "/alerts/new/",
        {"project": "globex", "name": "x", "metric": "records", "threshold": "1"},
    )
    assert "project" in response.context["form"].errors


# --- buttons -----------------------------------------------------------------------------------
def test_pause_resume_and_silence_from_the_list(alice, alice_page):
    rule = make_rule(alice)
    assert alice_page.post(f"/alerts/{rule.pk}/pause/", {"paused": "1"}).status_code == 302
    rule.refresh_from_db()
    assert rule.paused
    assert "state-paused" in alice_page.get("/alerts/").content.decode()
    alice_page.post(f"/alerts/{rule.pk}/pause/", {"paused": "0"})
    rule.refresh_from_db()
    assert not rule.paused

    response = alice_page.post(
        f"/alerts/{rule.pk}/silence/", {"minutes": "60", "next": "https://evil.example.com/"}
    )
    assert response["Location"] == "/alerts/"  # never redirected off-site
    rule.refresh_from_db()
    left = rule.silenced_until - timezone.now()
    assert timedelta(minutes=59) < left <= timedelta(minutes=60)
    assert "silenced until" in alice_page.get("/alerts/").content.decode()
    alice_page.post(f"/alerts/{rule.pk}/silence/", {"minutes": "0"})
    rule.refresh_from_db()
    assert rule.silenced_until is None


def test_send_test_and_enable_a_channel(alice, alice_page, settings):
    settings.DECISIONBOARD = {**settings.DECISIONBOARD, "ALERTS_ALLOW_PRIVATE_WEBHOOKS": True}
    receiver = Receiver([200])
    try:
        response = alice_page.post(
            "/alerts/channels/new/",
            {"project": "acme", "name": "hook", "kind": "webhook", "url": receiver.url},
        )
        channel = Channel.objects.get()
        assert response["Location"] == f"/alerts/channels/{channel.pk}/"
        channel.disabled, channel.consecutive_failures = True, 10
        channel.save()
        response = alice_page.post(f"/alerts/channels/{channel.pk}/test/", follow=True)
        assert "Sent a test notification to hook" in response.content.decode()
        assert json.loads(receiver.requests[0]["body"])["test"] is True
        alice_page.post(f"/alerts/channels/{channel.pk}/enable/")
        channel.refresh_from_db()
        assert not channel.disabled and channel.consecutive_failures == 0
    finally:
        receiver.close()


def test_a_webhook_to_an_internal_address_is_refused_when_saved(alice, alice_page):
    response = alice_page.post(
        "/alerts/channels/new/",
        {"project": "acme", "name": "hook", "kind": "webhook", "url": "http://169.254.169.254/"},
    )
    assert response.status_code == 200 and not Channel.objects.exists()
    assert "link-local" in response.content.decode()


# --- history and overview ----------------------------------------------------------------------
def test_the_history_filters_by_rule_and_state(alice, alice_page):
    slow, quiet = make_rule(alice), make_rule(alice, name="quiet agent")
    for rule, to_state in ((slow, "firing"), (slow, "ok"), (quiet, "nodata")):
        AlertEvent.objects.create(
            rule=rule, project=alice.project, group="g", from_state="ok", to_state=to_state,
            threshold=1, comparator="gt", window_minutes=5, at=timezone.now(),
        )  # fmt: skip
    page = alice_page.get("/alerts/events/", {"state": "nodata"}).content.decode()
    assert "quiet agent" in page and f"/alerts/{slow.pk}/" not in page
    page = alice_page.get("/alerts/events/", {"rule": slow.pk}).content.decode()
    assert page.count("<tr>") - 1 == 2  # two events under the header row
    assert "state: one of" in alice_page.get("/alerts/events/", {"state": "x"}).content.decode()


def test_the_overview_lists_what_is_firing_in_my_projects(alice, bob, alice_page):
    firing(make_rule(alice, name="mine is firing"))
    firing(make_rule(bob, name="theirs is firing"))
    page = alice_page.get("/").content.decode()
    assert "Firing alerts" in page and "mine is firing" in page
    assert "theirs is firing" not in page


def test_firing_alerts_list_critical_first_then_warnings_then_no_data(alice):
    rule = make_rule(alice)
    now = timezone.now()
    for group, state, severity, minutes in (
        ("nodata-old", "nodata", "", 30),
        ("warning-old", "firing", "warning", 20),
        ("critical-new", "firing", "critical", 1),
        ("critical-old", "firing", "critical", 10),
        ("ok", "ok", "", 40),
    ):
        AlertState.objects.create(
            rule=rule, group=group, state=state, severity=severity,
            since=now - timedelta(minutes=minutes), updated_at=now,
        )  # fmt: skip
    groups = [s.group for s in firing_alerts([alice.project.pk])]
    assert groups == ["critical-old", "critical-new", "warning-old", "nodata-old"]
    rule.paused = True
    rule.save()
    assert firing_alerts([alice.project.pk]) == []

"""The alert state machine and rule windows, with time frozen by passing `now`.

Most of these run without a database: alerts.evaluate and the folding in alerts.windows are plain
functions. The last tests hold the engine's window fold to the metrics API's totals.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from alerts import evaluate as ev
from alerts.evaluate import Condition, GroupState, Sample, evaluate, replay
from alerts.windows import (
    Query,
    RowIndex,
    collapse,
    fold,
    query_errors,
    read_rows,
    read_window,
    slide,
    window_errors,
    window_grain,
    window_start,
)
from records import catchup
from records.contract.rollup_keys import CLASSIFICATION, PICK_LATENCY
from records.contract.sketch import Sketch
from records.metrics.definitions import METRICS, Row
from records.models import Grain
from tests.support import rollup_data
from tests.support.factories import BASE_TS

T0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)


def minute(n: float) -> datetime:
    return T0 + timedelta(minutes=n)


def run(cond: Condition, values: list, group: str = "", count: int = 50):
    """Replay one value a minute (None: no rows); returns [(minute, state, events)]."""
    ticks = [
        (minute(i), {} if v is None else {group: Sample(v, count)}) for i, v in enumerate(values)
    ]
    return [(now, result.states.get(group), result.events) for now, result in replay(cond, ticks)]


def transitions(history) -> list[tuple]:
    return [
        (i, e.from_state, e.to_state, e.reason, e.notify)
        for i, (_, _, events) in enumerate(history)
        for e in events
    ]


ABOVE = Condition(comparator="gt", threshold=0.1)


# --- transitions -------------------------------------------------------------------------------
def test_it_stays_ok_below_the_threshold_and_records_nothing():
    history = run(ABOVE, [0.01, 0.05, 0.1])  # 0.1 is not above 0.1
    assert [state.state for _, state, _ in history] == ["ok", "ok", "ok"]
    assert transitions(history) == []


def test_it_fires_at_once_without_a_for_duration_and_says_so():
    history = run(ABOVE, [0.05, 0.2])
    (event,) = history[1][2]
    assert (event.from_state, event.to_state, event.severity) == ("ok", "firing", "critical")
    assert (event.value, event.count, event.threshold) == (0.2, 50, 0.1)
    assert event.notify and not event.silenced
    assert history[1][1].notified_at == minute(1)


def test_it_waits_pending_for_the_for_duration_before_firing():
    cond = replace(ABOVE, for_duration=timedelta(minutes=3))
    history = run(cond, [0.2, 0.2, 0.2, 0.2, 0.2])
    assert [s.state for _, s, _ in history] == ["pending", "pending", "pending", "firing", "firing"]
    assert transitions(history) == [
        (0, "ok", "pending", "transition", False),  # recorded, nobody paged
        (3, "pending", "firing", "transition", True),
    ]
    assert history[3][1].since == minute(3)


def test_it_goes_back_to_ok_from_pending_without_telling_anyone():
    cond = replace(ABOVE, for_duration=timedelta(minutes=5))
    history = run(cond, [0.2, 0.2, 0.01, 0.2])
    assert transitions(history) == [
        (0, "ok", "pending", "transition", False),
        (2, "pending", "ok", "transition", False),
        (3, "ok", "pending", "transition", False),  # the `for` period starts over
    ]
    assert history[3][1].pending_since == minute(3)


def test_it_sends_a_resolved_notification_when_the_value_recovers():
    history = run(ABOVE, [0.2, 0.3, 0.05])
    assert transitions(history) == [
        (0, "ok", "firing", "transition", True),
        (2, "firing", "ok", "transition", True),
    ]
    resolved = history[2][2][0]
    assert resolved.value == 0.05 and resolved.threshold == 0.1
    assert history[2][1].notified_at is None


def test_it_fires_as_a_warning_then_escalates_and_calms_down_to_warning():
    cond = Condition(comparator="gt", threshold=0.5, warning=0.2)
    history = run(cond, [0.1, 0.3, 0.6, 0.3])
    events = [e for _, _, es in history for e in es]
    assert [(e.to_state, e.severity, e.reason, e.threshold) for e in events] == [
        ("firing", "warning", "transition", 0.2),
        ("firing", "critical", "severity", 0.5),
        ("firing", "warning", "severity", 0.2),
    ]
    assert all(e.notify for e in events)


@pytest.mark.parametrize(
    ("comparator", "value", "fires"),
    [
        ("gt", 10, False),
        ("gte", 10, True),
        ("lt", 10, False),
        ("lte", 10, True),
        ("lt", 9.99, True),
    ],
)
def test_it_compares_at_the_boundary_as_the_comparator_says(comparator, value, fires):
    history = run(Condition(comparator=comparator, threshold=10), [value])
    assert (history[0][1].state == "firing") is fires


def test_it_refuses_a_warning_threshold_on_the_wrong_side():
    assert "warning_threshold" in ev.condition_errors("gt", 0.5, 0.7)
    assert "warning_threshold" in ev.condition_errors("lt", 0.5, 0.2)
    assert "warning_threshold" in ev.condition_errors("gt", 0.5, 0.5)
    assert ev.condition_errors("lt", 0.5, 0.7) == {}
    assert "comparator" in ev.condition_errors("eq", 1, None)


# --- re-notify, silence, pause ---------------------------------------------------------------
def test_it_reminds_the_channels_at_the_renotify_interval_while_firing():
    cond = replace(ABOVE, renotify=timedelta(minutes=3))
    history = run(cond, [0.2] * 8)
    assert [i for i, *_ in transitions(history)] == [0, 3, 6]
    assert [reason for _, _, _, reason, _ in transitions(history)] == [
        "transition",
        "renotify",
        "renotify",
    ]
    assert history[6][2][0].from_state == history[6][2][0].to_state == "firing"


def test_it_never_reminds_without_a_renotify_interval():
    history = run(ABOVE, [0.2] * 30)
    assert len(transitions(history)) == 1


def test_it_records_but_mutes_events_while_silenced_then_notifies_once_the_silence_ends():
    cond = replace(ABOVE, silenced_until=minute(3))
    history = run(cond, [0.2, 0.2, 0.2, 0.2, 0.2])
    fired = history[0][2][0]
    assert fired.to_state == "firing" and fired.silenced and not fired.notify
    assert history[1][2] == history[2][2] == []  # no reminders while silenced
    reminder = history[3][2][0]  # the silence ended at minute 3
    assert (reminder.reason, reminder.notify, reminder.silenced) == ("renotify", True, False)
    assert history[4][2] == []


def test_it_sends_no_resolved_message_for_an_alert_nobody_was_told_about():
    cond = replace(ABOVE, silenced_until=minute(10))
    history = run(cond, [0.2, 0.01])
    resolved = history[1][2][0]
    assert (resolved.from_state, resolved.to_state) == ("firing", "ok")
    assert not resolved.notify


def test_a_silence_that_ends_after_the_alert_resolved_sends_nothing():
    cond = replace(ABOVE, silenced_until=minute(2))
    history = run(cond, [0.2, 0.01, 0.01, 0.01])
    assert [e.notify for _, _, es in history for e in es] == [False, False]


def test_a_paused_rule_keeps_its_states_and_records_nothing():
    firing = {"": GroupState(state="firing", severity="critical", since=minute(0))}
    cond = replace(ABOVE, paused=True)
    result = evaluate(cond, {"": Sample(0.01, 50)}, firing, now=minute(5))
    assert result.events == [] and result.states == firing


def test_after_a_pause_the_for_period_starts_again():
    cond = replace(ABOVE, for_duration=timedelta(minutes=3))
    pending = {"": GroupState(state="pending", severity="critical", pending_since=minute(0))}
    # Evaluated a minute ago: still counting from minute 0, so it fires at minute 3.
    result = evaluate(
        cond, {"": Sample(0.2, 50)}, pending, now=minute(3), last_evaluated_at=minute(2)
    )
    assert result.states[""].state == "firing"
    # Paused for an hour: nobody saw the condition hold meanwhile, so pending starts over.
    result = evaluate(
        cond, {"": Sample(0.2, 50)}, pending, now=minute(60), last_evaluated_at=minute(1)
    )
    assert result.states[""].state == "pending"
    assert result.states[""].pending_since == minute(60)
    assert result.events == []


# --- no data -----------------------------------------------------------------------------------
def test_no_data_as_ok_resolves_a_firing_alert():
    cond = replace(ABOVE, no_data="ok")
    history = run(cond, [0.2, None])
    assert history[1][1].state == "ok"
    assert transitions(history)[-1] == (1, "firing", "ok", "transition", True)


def test_no_data_as_nodata_alerts_and_recovers():
    cond = replace(ABOVE, no_data="nodata")
    history = run(cond, [0.05, None, None, 0.05])
    assert [s.state for _, s, _ in history] == ["ok", "nodata", "nodata", "ok"]
    assert transitions(history) == [
        (1, "ok", "nodata", "transition", True),
        (3, "nodata", "ok", "transition", True),
    ]
    assert history[1][2][0].value is None


def test_no_data_as_keep_leaves_a_firing_alert_firing():
    cond = replace(ABOVE, no_data="keep", renotify=timedelta(minutes=2))
    history = run(cond, [0.2, None, None, None])
    assert [s.state for _, s, _ in history] == ["firing"] * 4
    assert [reason for _, _, _, reason, _ in transitions(history)] == ["transition", "renotify"]


def test_too_few_records_is_no_data():
    cond = replace(ABOVE, min_records=20, no_data="nodata")
    history = run(cond, [0.9], count=19)
    assert history[0][1].state == "nodata"
    assert run(cond, [0.9], count=20)[0][1].state == "firing"


def test_a_count_without_rows_is_zero_so_a_quiet_agent_fires():
    cond = Condition(comparator="lt", threshold=10, absent_is_zero=True, min_records=0)
    history = run(cond, [25, None])
    assert history[1][1].state == "firing"
    assert history[1][2][0].value == 0.0


# --- groups ------------------------------------------------------------------------------------
def test_each_group_is_tracked_on_its_own():
    cond = replace(ABOVE, grouped=True, for_duration=timedelta(minutes=1))
    states: dict = {}
    fired = []
    for i, samples in enumerate(
        [
            {"haiku": Sample(0.2, 30), "qwen": Sample(0.01, 30)},
            {"haiku": Sample(0.2, 30), "qwen": Sample(0.3, 30)},
            {"haiku": Sample(0.2, 30), "qwen": Sample(0.3, 30)},
        ]
    ):
        result = evaluate(cond, samples, states, now=minute(i), last_evaluated_at=minute(i - 1))
        fired += [(i, e.group) for e in result.events if e.to_state == "firing"]
        states = result.states
    assert fired == [(1, "haiku"), (2, "qwen")]
    assert "" not in states


def test_a_group_that_went_away_while_ok_is_forgotten_but_a_firing_one_resolves_first():
    cond = replace(ABOVE, grouped=True)
    states = {
        "gone-ok": GroupState(state="ok", since=minute(0)),
        "gone-firing": GroupState(state="firing", severity="critical", notified_at=minute(0)),
    }
    result = evaluate(cond, {"here": Sample(0.01, 5)}, states, now=minute(1))
    assert set(result.states) == {"here"}
    assert result.dropped == {"gone-ok", "gone-firing"}
    (resolved,) = result.events
    assert (resolved.group, resolved.to_state, resolved.notify) == ("gone-firing", "ok", True)


# --- windows -----------------------------------------------------------------------------------
def _rows(rng: random.Random, minutes: int) -> list[Row]:
    rows = []
    for m in range(minutes):
        for model in ("haiku", "qwen"):
            if rng.random() < 0.3:
                continue  # gaps: minutes without rows
            latencies = Sketch()  # both kinds' latencies, as the catch-up merges them
            for kind in ("tool_choice.pick", "tool_choice.pick_error"):
                n = rng.randrange(1, 6)
                latencies.extend(rng.lognormvariate(5, 1) for _ in range(n))
                rows.append(Row(minute(m), kind, "bot", model, "", n, 0, 0, {}))
            latency = latencies.to_json()
            rows.append(
                Row(minute(m), PICK_LATENCY, "bot", model, "", latencies.count, 0, 0, latency)
            )
    return rows


@pytest.mark.parametrize("metric", ["pick_error_rate", "classifier_latency_p95", "records"])
@pytest.mark.parametrize("window", [1, 7, 120])
def test_sliding_a_window_gives_what_folding_each_window_afresh_gives(metric, window):
    rows = _rows(random.Random(window), 200)
    query = Query(metric=metric, group_by="model")
    by_minute = {}
    for group in ("haiku", "qwen"):
        by_minute[group] = {}
        for row in rows:
            if row.model == group and row.kind in METRICS[metric].kinds:
                acc = by_minute[group].setdefault(row.bucket, METRICS[metric].make())
                for _, args in METRICS[metric].contribute(row):
                    acc.add(*args)
    # Times with a gap longer than the window, to cover starting afresh, and hour boundaries.
    times = [minute(m) for m in (*range(0, 20), *range(30, 40), *range(110, 200))]
    for group in ("haiku", "qwen"):
        slid = slide(query, by_minute[group], times, window)
        for t, got in zip(times, slid, strict=True):
            since = window_start(t, window)
            inside = [r for r in rows if since <= r.bucket <= t]
            want = fold(query, inside).get(group)
            assert got == (want.result() if want else METRICS[metric].make().result()), (t, group)


@pytest.mark.parametrize(
    "metric", ["pick_error_rate", "classifier_latency_p99", "narrowing_skip_rate", "records"]
)
@pytest.mark.parametrize("group_by", ["", "model", "agent"])
def test_rows_collapsed_per_key_fold_to_what_their_buckets_fold_to(metric, group_by):
    rows = _rows(random.Random(7), 90)
    rows += [replace(r, agent="other", count=r.count * 2) for r in rows[::3]]
    query = Query(metric=metric, group_by=group_by)
    since = minute(30)
    collapsed = collapse(rows, since)
    assert len(collapsed) < len([r for r in rows if r.bucket >= since])
    want = {g: a.result() for g, a in fold(query, rows, since=since).items()}
    assert {g: a.result() for g, a in fold(query, collapsed).items()} == want


def test_a_classifier_filter_reads_a_verdicts_seat_and_a_model_filter_its_model():
    def verdict(model, key, count):
        return Row(minute(0), "classifier.verdict", "bot", model, key, count, 0, 0, {})

    rows = RowIndex(
        [
            verdict("qwen3-8b", "parse_error|rung0|qwen3-8b", 3),
            verdict("claude-sonnet-4-5", "block|rung1|qwen3-8b", 2),  # walked on to the main model
            verdict("claude-sonnet-4-5", "allow|rung0|claude-sonnet-4-5", 7),
        ]
    )

    def total(**filters):
        query = Query(metric="verdicts", **filters)
        return {g: acc.result() for g, acc in fold(query, rows.rows_for(query)).items()}

    assert total(classifier="qwen3-8b") == {"": (5, 5)}
    assert total(model="claude-sonnet-4-5") == {"": (9, 9)}
    assert total(classifier="qwen3-8b", model="claude-sonnet-4-5") == {"": (2, 2)}
    # The ladder reads classifications, filed under their seat model (records.catchup.passes).
    classifications = RowIndex(
        [
            Row(minute(0), CLASSIFICATION, "bot", "qwen3-8b", "1", 2, 0, 0, {}),
            Row(minute(0), CLASSIFICATION, "bot", "qwen3-8b", "0", 1, 0, 0, {}),
            Row(minute(0), CLASSIFICATION, "bot", "claude-sonnet-4-5", "0", 7, 0, 0, {}),
        ]
    )
    ladder = Query(metric="ladder_fallback_rate", model="qwen3-8b")
    assert fold(ladder, classifications.rows_for(ladder))[""].result() == (2 / 3, 3)
    by_seat = Query(metric="ladder_fallback_rate", classifier="qwen3-8b")
    assert fold(by_seat, classifications.rows_for(by_seat))[""].result() == (2 / 3, 3)


def test_a_window_is_whole_minutes_ending_with_the_current_one():
    assert window_start(T0 + timedelta(seconds=42), 5) == minute(-4)
    assert window_start(T0, 1) == T0
    assert window_start(minute(60), 60) == minute(1)


def test_a_window_over_an_hour_is_whole_hours_ending_with_the_current_one():
    assert window_grain(120) == "hour" and window_grain(60) == "minute"
    assert window_start(minute(42.5), 120) == minute(-60)
    assert window_errors(90) and window_errors(0) and window_errors(25 * 60)
    assert window_errors(120) == window_errors(1440) == []


def test_it_names_what_a_rule_cannot_do():
    assert "metric" in query_errors(Query(metric="nope"))
    assert "group_by" in query_errors(Query(metric="first_pick_agreement", group_by="model"))
    assert "classifier" in query_errors(Query(metric="swap_rate", classifier="qwen3-8b"))
    assert "kind" in query_errors(Query(metric="pick_error_rate", kind="turn"))
    assert "match" in query_errors(Query(metric="swap_rate", match=(("verdict", "block"),)))
    assert query_errors(Query(metric="verdicts", match=(("verdict", "block"),))) == {}
    assert query_errors(Query(metric="contract_broken_streak", group_by="model")) == {}


# --- the fold against the metrics API ------------------------------------------------------------
END = BASE_TS + timedelta(minutes=95)
WINDOW = 45


@pytest.fixture
def mix(alice):
    records = rollup_data.build()
    client = alice.client()
    for i in range(0, len(records), 300):
        response = client.post("/api/v1/records", {"records": records[i : i + 300]}, format="json")
        assert response.status_code == 200, response.content
    assert catchup.catch_up() == len(records)
    return records


def _api_totals(persona, metric: str, group_by: str, **filters) -> dict:
    start = window_start(END, WINDOW)
    params = {
        "from": start.isoformat(),
        "to": (start + timedelta(minutes=WINDOW)).isoformat(),
        "interval": "minute",
        "group_by": group_by,
        **filters,
    }
    response = persona.client(persona.read_key).get(f"/api/v1/metrics/{metric}", params)
    assert response.status_code == 200, response.content
    return {t["group"][group_by]: (t["value"], t["count"]) for t in response.json()["totals"]}


def _fold(persona, query: Query) -> dict:
    """What the engine computes: the window's rows read added up per key, then folded."""
    start = window_start(END, WINDOW)
    rows = read_window(persona.project.pk, [query], start, END)
    accs = fold(query, RowIndex(rows).rows_for(query))
    return {group: acc.result() for group, acc in accs.items()}


@pytest.mark.both_dbs
@pytest.mark.parametrize("metric", [m for m in METRICS if "agent" in METRICS[m].group_bys])
def test_a_rule_window_by_agent_is_what_the_metrics_api_says(alice, mix, metric):
    want = _api_totals(alice, metric, "agent")
    assert want, "the mix has data for every metric"
    assert _fold(alice, Query(metric=metric, group_by="agent")) == want


@pytest.mark.both_dbs
@pytest.mark.parametrize(
    "metric",
    [
        "pick_error_rate",
        "narrowing_skip_rate",
        "swap_rate",
        "ladder_fallback_rate",
        "classifier_latency_p99",
    ],
)
def test_a_rule_window_by_model_is_what_the_metrics_api_says(alice, mix, metric):
    want = _api_totals(alice, metric, "model")
    assert _fold(alice, Query(metric=metric, group_by="model")) == want
    one = sorted(want)[0]
    filtered = _fold(alice, Query(metric=metric, group_by="model", model=one))
    assert filtered == {one: want[one]}


@pytest.mark.both_dbs
@pytest.mark.parametrize("metric", ["pick_error_rate", "classifier_latency_p95", "verdicts"])
def test_an_hour_window_reads_hour_rollups_and_agrees_with_the_minutes(alice, mix, metric):
    now = BASE_TS + timedelta(hours=3, minutes=10)  # the mix spans the three hours before
    start = window_start(now, 180)
    assert start == BASE_TS + timedelta(hours=1)
    query = Query(metric=metric, group_by="agent")
    hours = read_rows(alice.project.pk, [query], start, now, Grain.HOUR)
    minutes = read_rows(alice.project.pk, [query], start, now, Grain.MINUTE)
    assert 0 < len(hours) < len(minutes)

    def totals(rows):
        accs = fold(query, RowIndex(rows).rows_for(query))
        return {group: acc.result() for group, acc in accs.items()}

    engine = totals(read_window(alice.project.pk, [query], start, now, Grain.HOUR))
    assert engine == totals(collapse(hours, start)) == totals(collapse(minutes, start))
    response = alice.client(alice.read_key).get(
        f"/api/v1/metrics/{metric}",
        {"from": start.isoformat(), "to": now.isoformat(), "interval": "hour", "group_by": "agent"},
    )
    api = {t["group"]["agent"]: (t["value"], t["count"]) for t in response.json()["totals"]}
    assert engine == api

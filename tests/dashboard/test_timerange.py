"""The time-range control's reading of the URL (dashboard.web.timerange) and the periods it
makes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dashboard.charts import plotting, time_charts
from dashboard.queries.page_rollups import get_period, overview_range
from dashboard.web.timerange import CUSTOM, TimeRange, in_progress, jump_query, parse_range
from records.contract.filters import FilterError

NOW = datetime(2026, 12, 1, 10, 17, 30, tzinfo=UTC)


def test_it_reads_presets_up_to_90_days_and_defaults_to_6_hours():
    assert parse_range({"period": "90d"}).period(NOW).span == timedelta(days=90)
    assert parse_range({}).period(NOW).name == "6h"
    assert parse_range({}, lists=True) == TimeRange("")  # a list shows any time
    assert parse_range({}, lists=True).bounds(NOW) == (None, None)
    assert parse_range({"period": "24h"}, lists=True).bounds(NOW) == (NOW - timedelta(days=1), None)


def test_a_custom_range_takes_browser_fields_as_utc_and_rfc3339_as_is():
    chosen = parse_range({"period": "custom", "from": "2026-11-15T08:00", "to": "2026-11-17T08:00"})
    assert chosen.start == datetime(2026, 11, 15, 8, tzinfo=UTC)
    chosen = parse_range({"from": "2026-11-15T10:00:00+02:00", "to": "2026-11-17T08:00:00Z"})
    assert chosen.preset == CUSTOM and chosen.start == datetime(2026, 11, 15, 8, tzinfo=UTC)
    assert chosen.field("from") == "2026-11-15T08:00"


def test_a_custom_period_reads_whole_buckets_of_a_grain_fitting_its_length():
    two_weeks = parse_range({"from": "2026-11-15T08:30", "to": "2026-11-29T08:00"}).period(NOW)
    assert two_weeks.interval == "day" and two_weeks.label == "15 days"
    assert overview_range(NOW, two_weeks.name) == (
        datetime(2026, 11, 15, tzinfo=UTC),
        datetime(2026, 11, 30, tzinfo=UTC),
    )
    assert get_period(two_weeks.name) == two_weeks  # the pages pass it by name
    hours = parse_range({"from": "2026-11-15T08:30", "to": "2026-11-15T10:00"}).period(NOW)
    assert hours.interval == "minute" and hours.label == "1 hour 30 minutes"


@pytest.mark.parametrize(
    "query, param",
    [
        ({"period": "3w"}, "period"),
        ({"from": "yesterday"}, "from"),
        ({"from": "2026-11-15T08:00", "to": "2026-11-15T07:00"}, "to"),
        ({"from": "2020-01-01T00:00", "to": "2026-01-01T00:00"}, "from"),  # over 366 days
        ({"from": "0001-01-01T00:00"}, "from"),
        ({"to": "9999-12-31T23:59"}, "to"),
    ],
)
def test_a_bad_range_names_its_parameter(query, param):
    with pytest.raises(FilterError) as caught:
        parse_range(query)
    assert caught.value.param == param


def test_it_finds_the_bucket_still_filling_and_links_to_the_latest_data():
    period = get_period("6h")
    start, end = overview_range(NOW, "6h")
    assert in_progress(period, start, end, NOW) == (
        datetime(2026, 12, 1, 10, tzinfo=UTC),
        datetime(2026, 12, 1, 11, tzinfo=UTC),
    )
    past = parse_range({"from": "2026-11-01T00:00", "to": "2026-11-02T00:00"}).period(NOW)
    assert in_progress(past, past.start, past.end, NOW) is None
    latest = datetime(2026, 11, 20, 9, 0, 0, 10_000, tzinfo=UTC)
    assert jump_query(latest, timedelta(hours=6)) == {
        "period": "custom", "from": "2026-11-20T03:01", "to": "2026-11-20T09:01"
    }  # fmt: skip


def test_an_empty_figure_is_empty_and_a_partial_bucket_is_drawn_as_such():
    rates = time_charts.rates_over_time({"swap_rate": []}, {})
    assert rates["data"] and plotting.is_empty(rates)  # a trace with no points draws no axes
    t0, t1, t2 = (datetime(2026, 12, 1, h, tzinfo=UTC) for h in (8, 9, 10))
    line = time_charts.rates_over_time(
        {"swap_rate": [(t0, 0.1, 5), (t1, 0.2, 5), (t2, 0.5, 1)]}, {}
    )
    marked = plotting.mark_partial(line, t2, t2 + timedelta(hours=1))
    solid, dotted = marked["data"]
    assert solid["x"] == [plotting.when(t0), plotting.when(t1)] and "dash" not in solid["line"]
    assert dotted["x"] == [plotting.when(t1), plotting.when(t2)] and dotted["line"]["dash"] == "dot"
    assert dotted["showlegend"] is False
    assert [a["text"] for a in marked["layout"]["annotations"]] == ["in progress"]

"""The reference model of filtered numbers (tests/reference_filters.py) against hand-computed
cases: each number below was worked out on paper from the rules in its docstring."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_filters import (
    ALL_DIMENSIONS,
    SESSION_DIMENSIONS,
    Ev,
    breakdown,
    breakdown_with_comparison,
    change,
    compared,
    dashboard,
    previous_period,
    previous_year,
    select,
    summary,
    timeline,
    v2_rows,
    with_comparison,
)

UTCZ = ZoneInfo("UTC")
DAY = date(2026, 11, 20)
NOW = datetime(2026, 11, 20, 23, 0, tzinfo=UTC)


def at(hour: int, minute: int = 0, second: int = 0) -> datetime:
    return datetime(2026, 11, 20, hour, minute, second, tzinfo=UTC)


def site() -> list[Ev]:
    google = {"source": "Google", "channel": "Organic Search"}
    return [
        # s1: lands on / from Google, reads a unicode post, leaves after 5 minutes
        Ev(
            "pageview",
            at(10),
            "/",
            session_id="s1",
            visitor_id="v1",
            country="DE",
            browser="Firefox",
            **google,
        ),
        Ev(
            "pageview",
            at(10, 1),
            "/blog/ünïcode",
            session_id="s1",
            visitor_id="v1",
            country="DE",
            browser="Firefox",
            source="",
            channel="",
        ),
        Ev(
            "session_end",
            at(10, 5),
            "",
            session_id="s1",
            visitor_id="v1",
            country="DE",
            browser="Firefox",
        ),
        # s2: one page from a referring site, 1 s
        Ev(
            "pageview",
            at(11),
            "/blog/x",
            session_id="s2",
            visitor_id="v2",
            country="AT",
            browser="Chrome",
            source="news.example.org",
            channel="Referral",
        ),
        Ev(
            "session_end",
            at(11, 2),
            "",
            session_id="s2",
            visitor_id="v2",
            country="AT",
            browser="Chrome",
            duration_ms=1000,
        ),
        # s3: pricing, signs up, back to /
        Ev(
            "pageview",
            at(12),
            "/pricing",
            session_id="s3",
            visitor_id="v3",
            country="US",
            browser="Chrome",
            **google,
        ),
        Ev(
            "signup",
            at(12, 0, 30),
            "/pricing",
            session_id="s3",
            visitor_id="v3",
            country="US",
            browser="Chrome",
        ),
        Ev(
            "pageview",
            at(12, 1),
            "/",
            session_id="s3",
            visitor_id="v3",
            country="US",
            browser="Chrome",
        ),
        # no session id: stands for itself
        Ev(
            "pageview",
            at(13),
            "/blog/y",
            visitor_id="v4",
            country="DE",
            source="Direct / None",
            channel="Direct",
        ),
        # a crawler: left out, counted in botEvents
        Ev("pageview", at(14), "/", visitor_id="bot", is_bot=True, source="Direct / None"),
    ]


def numbers(filters) -> dict:
    sel = select(site(), filters, zone=UTCZ, first_day=DAY, last_day=DAY, now=NOW)
    return summary(sel)


CASES = [
    # filters, totalEvents, pageviews, visitors, sessions, bounceRate, avgSessionDurationMs
    ([], 9, 6, 4, 3, 33.33, 150500),
    # event filter: the matching events; sessions s1 and s2 (all their pageviews) for bounce
    ([["contains", "path", ["/BLOG"]]], 3, 3, 3, 2, 50.0, 150500),
    # contains_not keeps session_end rows (path ""), and s2 still bounces: whole sessions
    ([["contains_not", "path", ["blog"]]], 6, 3, 3, 3, 33.33, 150500),
    ([["is", "path", ["/blog/ünïcode"]]], 1, 1, 1, 1, 0.0, 300000),
    ([["contains", "path", ["ÜNÏ"]]], 1, 1, 1, 1, 0.0, 300000),
    # session filter: s1 (first event's source, though its 2nd event has none) and s3
    ([["is", "source", ["Google"]]], 6, 4, 2, 2, 0.0, 300000),
    ([["is_not", "source", ["Google"]]], 3, 2, 2, 1, 100.0, 1000),
    ([["is", "entryPage", ["/"]]], 3, 2, 1, 1, 0.0, 300000),
    ([["is", "exitPage", ["/"]]], 3, 2, 1, 1, 0.0, 0),
    ([["is", "source", ["Google"]], ["is", "country", ["DE", "AT"]]], 3, 2, 1, 1, 0.0, 300000),
    ([["is", "country", ["DE", "AT"]]], 6, 4, 3, 2, 50.0, 150500),
    ([["is", "event", ["signup"]]], 1, 0, 1, 1, 0.0, 0),
    ([["is", "browser", ["Chrome"]], ["is_not", "event", ["signup"]]], 4, 3, 2, 2, 50.0, 1000),
    ([["is", "path", ["' OR 1=1 --"]]], 0, 0, 0, 0, 0.0, 0),
    ([["contains", "source", ["google", "NEWS"]]], 8, 5, 3, 3, 33.33, 150500),
]


@pytest.mark.parametrize(("filters", "total", "pv", "vis", "ses", "bounce", "dur"), CASES)
def test_summary_under_filters(filters, total, pv, vis, ses, bounce, dur) -> None:
    got = numbers(filters)
    assert (
        got["totalEvents"],
        got["pageviews"],
        got["uniqueVisitors"],
        got["uniqueSessions"],
        got["bounceRate"],
        got["avgSessionDurationMs"],
        got["botEvents"],
    ) == (total, pv, vis, ses, bounce, dur, 1)


def test_sql_looking_values_are_plain_text() -> None:
    events = [
        Ev("pageview", at(9), "' OR 1=1 --", session_id="a", visitor_id="x"),
        Ev("pageview", at(9, 1), "/'; DROP TABLE events; --", session_id="b", visitor_id="y"),
        Ev("pageview", at(9, 2), "/%' OR '1'='1", session_id="c", visitor_id="z"),
    ]

    def total(filters) -> int:
        sel = select(events, filters, zone=UTCZ, first_day=DAY, last_day=DAY)
        return summary(sel)["totalEvents"]

    assert total([["is", "path", ["' OR 1=1 --"]]]) == 1
    assert total([["contains", "path", ["drop table"]]]) == 1
    assert total([["contains", "path", ["%"]]]) == 1  # no LIKE wildcards
    assert total([["contains", "path", ["_"]]]) == 0
    assert total([["contains_not", "path", ["'"]]]) == 0


def test_breakdown_by_session_dimension() -> None:
    rows = breakdown(site(), "source", zone=UTCZ, first_day=DAY, last_day=DAY)
    assert rows == [
        {"value": "Google", "visitors": 2, "pageviews": 4, "events": 6},
        {"value": "Direct / None", "visitors": 1, "pageviews": 1, "events": 1},
        {"value": "news.example.org", "visitors": 1, "pageviews": 1, "events": 2},
    ]


def test_breakdown_by_event_dimension_under_session_filter() -> None:
    rows = breakdown(
        site(), "path", [["is", "source", ["Google"]]], zone=UTCZ, first_day=DAY, last_day=DAY
    )
    assert rows == [
        {"value": "/", "visitors": 2, "pageviews": 2, "events": 2},
        {"value": "/blog/ünïcode", "visitors": 1, "pageviews": 1, "events": 1},
        {"value": "/pricing", "visitors": 1, "pageviews": 1, "events": 2},
    ]


def test_breakdown_entry_and_exit_pages() -> None:
    entry = breakdown(site(), "entryPage", zone=UTCZ, first_day=DAY, last_day=DAY)
    assert [(r["value"], r["events"]) for r in entry] == [
        ("/", 3),  # 1 visitor, 2 pageviews: ties with /pricing, then by value
        ("/pricing", 3),
        ("/blog/x", 2),
        ("/blog/y", 1),
    ]
    exits = breakdown(site(), "exitPage", zone=UTCZ, first_day=DAY, last_day=DAY, limit=2)
    assert [r["value"] for r in exits] == ["/", "/blog/ünïcode"]


def test_dashboard_lists_and_bots() -> None:
    board = dashboard(
        site(), [["is", "country", ["US"]]], zone=UTCZ, first_day=DAY, last_day=DAY, now=NOW
    )
    assert board["topPaths"] == [{"path": "/", "views": 1}, {"path": "/pricing", "views": 1}]
    assert board["eventBreakdown"] == [
        {"name": "pageview", "count": 2},
        {"name": "signup", "count": 1},
    ]
    assert sum(h["count"] for h in board["hourlyHeatmap"]) == 3
    assert board["hourlyHeatmap"][12]["count"] == 3
    with_bots = dashboard(
        site(), zone=UTCZ, first_day=DAY, last_day=DAY, now=NOW, exclude_bots=False
    )
    assert with_bots["summary"]["totalEvents"] == 10
    assert with_bots["summary"]["botEvents"] == 0


def test_timeline_local_days_across_spring_forward() -> None:
    ny = ZoneInfo("America/New_York")
    events = [
        Ev("pageview", datetime(2026, 3, 8, 4, 30, tzinfo=UTC), "/", visitor_id="a"),  # Mar 7 23:30
        Ev("pageview", datetime(2026, 3, 8, 5, 0, tzinfo=UTC), "/", visitor_id="a"),  # Mar 8 00:00
        Ev("pageview", datetime(2026, 3, 9, 3, 59, tzinfo=UTC), "/", visitor_id="b"),  # 23:59 EDT
        Ev("pageview", datetime(2026, 3, 9, 4, 0, tzinfo=UTC), "/", visitor_id="b"),  # Mar 9
    ]
    sel = select(events, [], zone=ny, first_day=date(2026, 3, 7), last_day=date(2026, 3, 8))
    assert timeline(sel, ny, date(2026, 3, 7), date(2026, 3, 8)) == [
        {"day": "2026-03-07", "events": 1, "pageviews": 1, "visitors": 1},
        {"day": "2026-03-08", "events": 2, "pageviews": 2, "visitors": 2},
    ]


def test_comparison_ranges_and_change() -> None:
    assert previous_period(date(2026, 11, 14), date(2026, 11, 20)) == (
        date(2026, 11, 7),
        date(2026, 11, 13),
    )
    assert previous_year(date(2028, 2, 29), date(2028, 3, 1)) == (
        date(2027, 2, 28),
        date(2027, 3, 1),
    )
    assert change(150, 100) == 50.0
    assert change(0, 100) == -100.0
    assert change(1, 3) == -66.7
    assert change(449, 400) == 12.3  # 12.25: half up, not to even
    assert change(5, 0) is None
    assert compared({"a": 2, "b": 33.33, "c": "x"}, {"a": 1, "b": 0, "c": "y"}) == {
        "a": 100.0,
        "b": None,
    }


def test_v2_rows() -> None:
    rows = v2_rows(
        site(),
        ["visitors", "visits", "bounce_rate"],
        ["source"],
        zone=UTCZ,
        first_day=DAY,
        last_day=DAY,
    )
    assert rows == {
        ("Google",): [2, 2, 0.0],
        ("news.example.org",): [1, 1, 100.0],
        ("Direct / None",): [1, 0, 0.0],
    }
    by_hour = v2_rows(
        site(),
        ["events"],
        ["time:hour"],
        zone=ZoneInfo("Asia/Kathmandu"),
        first_day=DAY,
        last_day=DAY,
    )
    assert by_hour[("2026-11-20 15:00:00",)] == [3]  # 10:00 UTC is 15:45 in Kathmandu


def test_readme_example_of_session_metrics() -> None:
    """README, "Filters": the two-session example under ["contains","path",["/blog"]]."""
    events = [
        Ev("pageview", at(9), "/", session_id="a", visitor_id="x"),
        Ev("pageview", at(9, 1), "/blog/a", session_id="a", visitor_id="x"),
        Ev("session_end", at(9, 5), session_id="a", visitor_id="x", duration_ms=300_000),
        Ev("pageview", at(10), "/blog/b", session_id="b", visitor_id="y"),
        Ev("session_end", at(10, 0, 1), session_id="b", visitor_id="y"),
    ]
    sel = select(events, [["contains", "path", ["/blog"]]], zone=UTCZ, first_day=DAY, last_day=DAY)
    got = summary(sel)
    assert (
        got["pageviews"],
        got["uniqueSessions"],
        got["bounceRate"],
        got["avgSessionDurationMs"],
    ) == (2, 2, 50.0, 150500)


# --- properties of the model itself: a filter and its negation split the traffic ---------------
words = st.sampled_from(["", "/", "/Blog", "/blog/ü", "Google", "google", "DE", "' OR 1=1 --"])


@st.composite
def traffic(draw) -> list[Ev]:
    out = []
    for i in range(draw(st.integers(0, 25))):
        out.append(
            Ev(
                draw(st.sampled_from(["pageview", "pageview", "session_end", "signup"])),
                at(draw(st.integers(0, 23)), draw(st.integers(0, 59)), i % 60),
                path=draw(words),
                referrer=draw(words),
                session_id=draw(st.sampled_from(["", "s1", "s2", "s3"])),
                visitor_id=draw(st.sampled_from(["", "v1", "v2"])),
                browser=draw(words),
                country=draw(words),
                source=draw(words),
                utm_term=draw(words),
                is_bot=draw(st.booleans()),
            )
        )
    return out


@settings(max_examples=200, deadline=None)
@given(traffic(), st.sampled_from(sorted(ALL_DIMENSIONS)), st.lists(words, min_size=1, max_size=2))
def test_a_filter_and_its_negation_split_the_events(events, dim, values) -> None:
    def totals(filters) -> dict:
        return numbers_of(events, filters)

    whole = totals([])
    for yes, no in (("is", "is_not"), ("contains", "contains_not")):
        a, b = totals([[yes, dim, values]]), totals([[no, dim, values]])
        assert a["totalEvents"] + b["totalEvents"] == whole["totalEvents"]
        assert a["pageviews"] + b["pageviews"] == whole["pageviews"]
        if dim in SESSION_DIMENSIONS:  # whole sessions go one way or the other
            assert a["uniqueSessions"] + b["uniqueSessions"] == whole["uniqueSessions"]


def numbers_of(events, filters) -> dict:
    return summary(select(events, filters, zone=UTCZ, first_day=DAY, last_day=DAY))


@settings(max_examples=200, deadline=None)
@given(traffic(), st.sampled_from(sorted(ALL_DIMENSIONS)))
def test_breakdown_rows_add_up_to_the_total(events, by) -> None:
    rows = breakdown(events, by, zone=UTCZ, first_day=DAY, last_day=DAY, limit=10_000)
    empty = summary(select(events, [["is", by, [""]]], zone=UTCZ, first_day=DAY, last_day=DAY))
    total = numbers_of(events, [])
    assert sum(r["events"] for r in rows) + empty["totalEvents"] == total["totalEvents"]
    for row in rows:  # each row is what filtering by its value gives
        one = numbers_of(events, [["is", by, [row["value"]]]])
        assert (row["events"], row["pageviews"], row["visitors"]) == (
            one["totalEvents"],
            one["pageviews"],
            one["uniqueVisitors"],
        )


def test_comparison_of_the_dashboard_and_of_breakdown_rows() -> None:
    week_before = [
        Ev(
            e.name,
            e.occurred_at - timedelta(days=1),
            e.path,
            session_id=e.session_id + "p",
            visitor_id=e.visitor_id,
            source=e.source,
            duration_ms=e.duration_ms,
        )
        for e in site()[:5]  # s1 and s2 a day earlier
    ]
    board = with_comparison(
        site() + week_before,
        [["is_not", "path", ["/pricing"]]],
        compare="previous_period",
        zone=UTCZ,
        first_day=DAY,
        last_day=DAY,
        now=NOW,
    )
    comparison = board["comparison"]
    assert (comparison["from"], comparison["to"]) == ("2026-11-19", "2026-11-19")
    # now: s1 (3), s2 (2), s3 without /pricing events (1), e4 (1) = 7; before: s1, s2 = 5
    assert (board["summary"]["totalEvents"], comparison["summary"]["totalEvents"]) == (7, 5)
    assert comparison["change"]["totalEvents"] == 40.0
    assert comparison["change"]["botEvents"] is None  # 0 before
    assert comparison["timeline"] == [
        {"day": "2026-11-19", "events": 5, "pageviews": 3, "visitors": 2}
    ]
    rows = breakdown_with_comparison(
        site() + week_before,
        "source",
        compare="previous_period",
        zone=UTCZ,
        first_day=DAY,
        last_day=DAY,
    )
    assert rows[0]["value"] == "Google"
    assert rows[0]["comparison"] == {
        "visitors": 1,
        "pageviews": 2,
        "events": 3,
        "change": {"visitors": 100.0, "pageviews": 100.0, "events": 100.0},
    }
    assert rows[1]["value"] == "Direct / None"
    assert rows[1]["comparison"]["change"] == {"visitors": None, "pageviews": None, "events": None}

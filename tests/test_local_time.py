"""Days in the project's time zone and bots left out: every dashboard number against the
reference model (tests/reference.py) for zones with DST, 30- and 45-minute offsets, with events on
both sides of local midnights, of DST changes and of the window's edges.

Rows are stored directly in ``events`` with every column given (is_bot included, which only
ingestion sets), so the materialized views fire as they do for collected events. The dashboard
is asked through the query layer with an injected ``now`` (the zone and bot rule are a project's
settings, which the controller reads); the HTTP route is checked for a UTC project."""

from __future__ import annotations

import asyncio
import json
import random
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import msgspec
import pytest

from conftest import COLUMNS_BEFORE_005, auth, new_project
from reference import Sent, dashboard
from tally.http.views import build_dashboard
from tally.query import Query, decide
from tally.storage import dashboard as runner
from test_dashboard import build_events, fetch, without_ids

# Every column given, as ingestion stores them: those Tally always wrote, then schema 005's.
COLUMNS = [
    *COLUMNS_BEFORE_005,
    "is_bot",
    "source",
    "channel",
    "utm_source",
    "utm_medium",
    "utm_campaign",
    "utm_content",
    "utm_term",
    "country",
]


def _duration(event: Sent) -> float | None:
    given = event.metadata.get("durationMs")
    if isinstance(given, int | float) and not isinstance(given, bool) and given >= 0:
        return float(given)
    return None


def store(client, project_id: str, events: list[Sent]) -> None:
    """INSERT the events into ``events`` as ingestion would store them, every column given."""
    insert_events(client.app.state.storage, project_id, events)


def insert_events(storage, project_id: str, events: list[Sent]) -> None:
    """:func:`store` into any storage: one INSERT, so one new part of each table."""
    rows = [
        [
            project_id,
            e.name,
            e.occurred_at,
            e.occurred_at,
            e.path,
            "",
            e.referrer,
            e.session_id,
            e.visitor_id,
            e.browser,
            e.os,
            e.device_type,
            _duration(e),
            json.dumps(e.metadata),
            "127.0.0.1",
            "test",
            "k",
            int(e.is_bot),
            e.source,
            e.channel,
            e.utm_source,
            e.utm_medium,
            e.utm_campaign,
            e.utm_content,
            e.utm_term,
            e.country,
        ]
        for e in events
    ]
    storage.insert(f"{storage.database}.events", list(map(list, zip(*rows, strict=True))), COLUMNS)


def answer(client, project_id: str, now: datetime, days: int, tz: str, bots: bool) -> dict:
    return answer_from(client.app.state.storage, project_id, now, days, tz, bots)


def answer_from(storage, project_id: str, now: datetime, days: int, tz: str, bots: bool) -> dict:
    """The dashboard the query layer gives for these settings, as the API would serve it."""
    query = Query(project_id, days, now, tz=tz, exclude_bots=bots)
    rows = asyncio.run(runner.fetch(storage, query))
    result = msgspec.to_builtins(build_dashboard(rows, query))
    assert result.pop("dataThrough") is None  # set by the handler, from the ingest log
    return without_ids(result)


def around(moment: datetime, rng: random.Random, tag: str) -> list[Sent]:
    """Events a millisecond, a second and a minute either side of ``moment``, in one session
    that crosses it, some from a bot."""
    out = []
    for i, delta in enumerate((-60_000, -1_000, -1, 0, 1, 1_000, 60_000)):
        out.append(
            Sent(
                "pageview" if i % 3 else "signup",
                moment + timedelta(milliseconds=delta),
                f"/{tag}/{i}",
                "https://ref.example/" if i == 0 else "",
                f"{tag}-s",
                f"{tag}-v{i % 2}",
                rng.choice(["Chrome", "Firefox"]),
                "desktop",
                is_bot=(i == 5),
            )
        )
    out.append(Sent("session_end", moment + timedelta(minutes=2), "", "", f"{tag}-s", f"{tag}-v0"))
    return out


def zone_events(now: datetime, tz: str, changes: list[datetime], seed: int) -> list[Sent]:
    """The dashboard suite's mixed traffic, some of it from bots, plus events on both sides of
    every local midnight of the last 16 days, of each UTC midnight, and of each DST change."""
    rng = random.Random(seed)
    events = build_events(now, seed=seed)
    for e in events:
        e.is_bot = rng.random() < 0.15
    zone = ZoneInfo(tz)
    today = now.astimezone(zone).date()
    for back in range(16):
        day = today - timedelta(days=back)
        local_midnight = datetime(day.year, day.month, day.day, tzinfo=zone).astimezone(UTC)
        events += around(local_midnight, rng, f"m{back}")
        utc_midnight = datetime(day.year, day.month, day.day, tzinfo=UTC)
        events += around(utc_midnight, rng, f"u{back}")
    for n, change in enumerate(changes):
        events += around(change, rng, f"dst{n}")
    cutoff = now - timedelta(seconds=1)
    used: set[datetime] = set()
    kept = []
    for e in sorted(events, key=lambda e: e.occurred_at):
        if e.occurred_at <= cutoff and e.occurred_at not in used:  # distinct times: "latest 20"
            used.add(e.occurred_at)
            kept.append(e)
    return kept


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


# (zone, now, the zone's DST changes near it, as UTC instants)
SCENARIOS = [
    # New York: spring forward 2026-03-08 02:00 EST (07:00 UTC), fall back 2026-11-01 02:00 EDT.
    ("America/New_York", utc(2026, 3, 10, 15, 7, 3), [utc(2026, 3, 8, 7)]),
    ("America/New_York", utc(2026, 11, 3, 4, 30), [utc(2026, 11, 1, 6)]),
    # Berlin: 2026-03-29 01:00 UTC and 2026-10-25 01:00 UTC; now just after local midnight.
    ("Europe/Berlin", utc(2026, 3, 30, 22, 20), [utc(2026, 3, 29, 1)]),
    ("Europe/Berlin", utc(2026, 10, 27, 23, 5), [utc(2026, 10, 25, 1)]),
    # Kathmandu, +5:45 all year.
    ("Asia/Kathmandu", utc(2026, 6, 15, 18, 30), []),
    # Lord Howe: +11 -> +10:30 on 2026-04-05 02:00 local (15:00 UTC the 4th), back on 2026-10-04.
    ("Australia/Lord_Howe", utc(2026, 4, 7, 13, 45), [utc(2026, 4, 4, 15)]),
    ("Australia/Lord_Howe", utc(2026, 10, 6, 14), [utc(2026, 10, 3, 15, 30)]),
    # Chatham: +13:45 -> +12:45 on 2026-04-05 03:45 local (14:00 UTC the 4th); +13:45 from
    # 2026-09-27 02:45 local (14:00 UTC the 26th).
    ("Pacific/Chatham", utc(2026, 4, 6, 11, 10), [utc(2026, 4, 4, 14)]),
    ("Pacific/Chatham", utc(2026, 9, 28, 12), [utc(2026, 9, 26, 14)]),
    # Kolkata, +5:30, and UTC itself.
    ("Asia/Kolkata", utc(2026, 2, 1, 19), []),
    ("UTC", utc(2026, 7, 1, 12), []),
]


@pytest.mark.parametrize(("tz", "now", "changes"), SCENARIOS, ids=lambda v: str(v)[:19])
def test_dashboard_in_the_project_zone_matches_the_reference(client, tz, now, changes):
    for change in changes:  # the scenario is where it says it is
        before, after = (change + timedelta(minutes=m) for m in (-1, 1))
        zone = ZoneInfo(tz)
        assert before.astimezone(zone).utcoffset() != after.astimezone(zone).utcoffset()
    project_id, _ = new_project(client)
    events = zone_events(now, tz, changes, seed=len(tz) + now.day)
    store(client, project_id, events)
    assert sum(e.is_bot for e in events) > 10
    for days in (1, 2, 7, 14, 90):
        for bots in (True, False):
            expected = dashboard(events, now, days, tz=tz, exclude_bots=bots)
            got = answer(client, project_id, now, days, tz, bots)
            assert got == expected, f"{tz} days={days} exclude_bots={bots}"


def test_a_change_of_zone_applies_to_all_history(client):
    """The same stored events, asked in one zone and then another: each answer is that zone's."""
    project_id, _ = new_project(client)
    now = utc(2026, 8, 20, 10)
    events = zone_events(now, "Asia/Kathmandu", [], seed=5)
    store(client, project_id, events)
    for tz in ("Asia/Kathmandu", "America/Los_Angeles", "UTC", "Pacific/Chatham"):
        assert answer(client, project_id, now, 30, tz, True) == dashboard(events, now, 30, tz)


def test_a_25_and_a_23_hour_day_are_one_day_each(client):
    project_id, _ = new_project(client)
    now = utc(2026, 11, 3, 12)
    tz = "America/New_York"
    # One event per UTC hour over both DST changes' days: 25 on 1 Nov, 24 on the others.
    events = [Sent("pageview", utc(2026, 10, 30) + timedelta(hours=h), "/h") for h in range(100)]
    store(client, project_id, events)
    got = answer(client, project_id, now, 5, tz, True)
    assert got == dashboard(events, now, 5, tz)
    by_day = {p["day"]: p["events"] for p in got["timeline"]}
    assert by_day["2026-11-01"] == 25 and by_day["2026-10-31"] == 24


def test_only_zones_off_utc_midnight_read_the_raw_edge():
    now = utc(2026, 6, 1, 12)
    assert decide(Query("p" * 24, 7, now)).edge is None
    assert decide(Query("p" * 24, 7, now, tz="Europe/London")).edge is not None
    kathmandu = decide(Query("p" * 24, 7, now, tz="Asia/Kathmandu"))
    assert kathmandu.edge == (utc(2026, 5, 25, 18, 15), utc(2026, 5, 26))
    with pytest.raises(ValueError, match="unknown time zone"):
        Query("p" * 24, 7, now, tz="Mars/Olympus")


def test_local_days_are_utc_days_only_where_every_midnight_is_a_utc_one():
    """The plan reads visitors per UTC day (visitors_daily) only when each local day of the
    window is a UTC day: in UTC, and in London for a window of winter days, but not for a
    window whose start and end are in winter with the summer's days between them."""
    winter = utc(2026, 2, 20, 12)
    assert decide(Query("p" * 24, 90, winter)).utc_days
    assert decide(Query("p" * 24, 30, winter, tz="Europe/London")).utc_days
    assert not decide(Query("p" * 24, 30, winter, tz="Asia/Kathmandu")).utc_days
    year = Query(
        "p" * 24, 365, winter, "Europe/London", first=date(2025, 1, 1), last=date(2025, 12, 31)
    )
    assert year.start.hour == 0 and year.end.hour == 0 and not decide(year).utc_days


def test_bots_are_left_out_of_the_served_dashboard(client):
    """Over HTTP (a UTC project leaves bots out): bot events count nowhere, and botEvents says
    how many of the window's were left out."""
    project_id, _ = new_project(client)
    now = datetime.now(UTC)
    start = now - timedelta(hours=1)
    events: list[Sent] = []
    for i in range(30):
        bot = i % 3 == 0
        events.append(
            Sent(
                "pageview",
                start + timedelta(seconds=i),
                "/crawl" if bot else f"/p{i % 4}",
                "",
                f"s{i % 7}" if not bot else f"bot-s{i}",
                f"v{i % 5}" if not bot else "googlebot",
                "Googlebot" if bot else "Chrome",
                "bot" if bot else "desktop",
                is_bot=bot,
            )
        )
    store(client, project_id, events)
    for days in (1, 7):
        got: dict[str, Any] = without_ids(fetch(client, project_id, days))
        assert got == dashboard(events, now, days)
        if days == 7:  # "today" may have begun within the hour the events span
            assert got["summary"]["botEvents"] == 10
        assert "Googlebot" not in json.dumps(got)
    response = client.get(f"/api/dashboard?projectId={project_id}", headers=auth("mallory"))
    assert response.status_code == 404


@pytest.mark.parametrize(
    ("zone", "off", "on"),
    [
        ("Africa/Monrovia", ("1971-06-01", "1971-06-02"), ("1973-06-01", "1973-06-02")),
        ("Pacific/Kiritimati", ("1975-01-01", "1975-01-07"), ("1980-01-01", "1980-01-07")),
    ],
)
def test_days_of_a_local_mean_time_are_a_400_in_words(client, zone, off, on):
    """Two zones kept a local mean time into the 1970s (Monrovia -0:44:30, Kiritimati -10:40):
    their days there do not start on the 15-minute grid of the rollups. The decider refused them
    with a ValueError that nothing caught: a 500 on the dashboard, breakdowns and the query API."""
    headers = auth("alice")
    created = client.post(
        "/api/projects", json={"name": "Old days", "timezone": zone}, headers=headers
    )
    assert created.status_code == 201, created.text
    project_id = created.json()["projectId"]
    for path in ("/api/dashboard", "/api/breakdown", "/api/dashboard?compare=previous_period&"):
        sep = "&" if "?" in path else "?"
        by = "&by=source" if "breakdown" in path else ""
        answer = client.get(
            f"{path.rstrip('&')}{sep}projectId={project_id}&from={off[0]}&to={off[1]}{by}",
            headers=headers,
        )
        assert answer.status_code == 400, (path, answer.text)
        body = answer.json()
        assert body["error"] == "Invalid query"
        assert body["details"][0]["path"] == "$.from"
        assert "a local mean time off the 15-minute grid" in body["details"][0]["message"]
        later = client.get(
            f"{path.rstrip('&')}{sep}projectId={project_id}&from={on[0]}&to={on[1]}{by}",
            headers=headers,
        )
        assert later.status_code == 200, (path, later.text)
    query = {"site_id": project_id, "metrics": ["visitors"], "date_range": list(off)}
    answer = client.post("/api/v2/query", json=query, headers=headers)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == "Invalid payload"
    assert answer.json()["details"][0]["path"] == "$.date_range"


def test_a_comparison_range_off_the_grid_is_a_400_naming_compare(client):
    """The range asked for is on the grid (Monrovia left its local mean time on 1972-01-07) but
    the year before is not. The 400 named `$.from` and 1971-05-01, a date the user never sent,
    and the breakdown answered 200 with no rows while the range was empty, 400 once it had
    events: it names compare, says it is the comparison range, and is the same either way."""
    headers = auth("alice")
    created = client.post(
        "/api/projects", json={"name": "Monrovia", "timezone": "Africa/Monrovia"}, headers=headers
    )
    assert created.status_code == 201, created.text
    project_id, key = created.json()["projectId"], created.json()["apiKey"]
    asked = f"projectId={project_id}&from=1972-05-01&to=1972-05-02&compare=previous_year"

    def refused(path: str) -> None:
        sep = "&" if "?" in path else "?"
        answer = client.get(f"{path}{sep}{asked}", headers=headers)
        assert answer.status_code == 400, (path, answer.text)
        body = answer.json()
        assert body["error"] == "Invalid query"
        [detail] = body["details"]
        assert detail["path"] == "$.compare"
        assert detail["message"] == (
            "the comparison range (previous_year) starts 1971-05-01, which in Africa/Monrovia is "
            "-0:44:30 from UTC, a local mean time off the 15-minute grid Tally's rollups keep; "
            "choose later dates, or leave out compare"
        )

    # No events in the range yet.
    refused("/api/dashboard")
    refused("/api/breakdown?by=path")
    # With events in it (the breakdown then has rows to compare).
    events = [{"name": "pageview", "path": "/x", "occurredAt": "1972-05-01T12:00:00Z"}]
    sent = client.post("/api/collect", json={"events": events}, headers={"x-api-key": key})
    assert sent.status_code == 202, sent.text
    without_compare = asked.replace("&compare=previous_year", "")
    rows = client.get(f"/api/breakdown?by=path&{without_compare}", headers=headers).json()["rows"]
    assert [r["value"] for r in rows] == ["/x"]
    for by in ("path", "source", "country"):
        refused(f"/api/breakdown?by={by}")
    refused("/api/dashboard")
    # previous_period: the days just before (1972-04-29..30) are on the grid: answered.
    period = asked.replace("previous_year", "previous_period")
    assert client.get(f"/api/breakdown?by=path&{period}", headers=headers).status_code == 200


CHROME_UA = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/120.0.0.0 Safari/537.36"
)


@pytest.mark.parametrize(
    "filters",
    [
        pytest.param("", id="unfiltered (rollups)"),
        pytest.param('[["is","path",["/x"]]]', id="event filter (raw)"),
        pytest.param('[["is","entryPage",["/x"]]]', id="session filter"),
        pytest.param('[["is","browser",["Chrome"]]]', id="audience filter"),
    ],
)
def test_a_local_day_before_1970_counts_its_events(client, filters):
    """The first hours of 1970 in UTC are 1969-12-31 in New York, a day a comparison range can
    reach (``from`` is 1970 at the earliest). ClickHouse's ``Date`` starts at 1970-01-01, so the
    event's local day came back as 1970-01-01, outside the comparison's days: its totalEvents,
    pageviews and timeline said 0 beside 1 visitor and 1 session. Days are ``Date32`` now."""
    user = "epoch-days"
    created = client.post(
        "/api/projects",
        json={"name": "Epoch", "timezone": "America/New_York"},
        headers=auth(user),
    )
    project_id, key = created.json()["projectId"], created.json()["apiKey"]
    event = {"name": "pageview", "path": "/x", "sessionId": "s1", "visitorId": "v1"}
    sent = client.post(
        "/api/collect",
        json={"events": [event | {"occurredAt": "1970-01-01T00:00:00Z"}]},
        headers={"x-api-key": key, "user-agent": CHROME_UA},
    )
    assert sent.status_code == 202, sent.text
    asked = f"projectId={project_id}&from=1970-01-01&to=1970-01-01&compare=previous_period"
    if filters:
        asked += f"&filters={filters}"
    body = client.get(f"/api/dashboard?{asked}", headers=auth(user)).json()
    earlier = body["comparison"]
    assert (earlier["from"], earlier["to"]) == ("1969-12-31", "1969-12-31")
    summary = earlier["summary"]
    assert (summary["totalEvents"], summary["pageviews"], summary["uniqueVisitors"]) == (1, 1, 1)
    assert earlier["timeline"] == [
        {"day": "1969-12-31", "events": 1, "pageviews": 1, "visitors": 1}
    ]
    assert earlier["change"]["totalEvents"] == -100.0

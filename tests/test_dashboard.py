"""Dashboard numbers against the reference model of CONTRACT.md (tests/reference.py)."""

from __future__ import annotations

import random
import re
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from conftest import auth, new_project, stored
from reference import Sent, dashboard
from tally.query import Query
from tally.query.sql import dashboard_sql, parameters

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
PATHS = [
    "/",
    "/pricing",
    "/docs",
    "/blog/ß-straße",
    "/日本語",
    "/emoji/🎉",
    "/שלום",
    "/a",
    "/b",
    "/c",
    "/d",
    "/e",
    "/f",
]
REFERRERS = ["https://google.com/", "https://news.ycombinator.com/", "https://t.co/x", ""]
BROWSERS = ["Chrome", "Firefox", "Safari", "Edge"]
DEVICES = ["desktop", "mobile", "tablet"]
NAMES = ["signup", "click", "purchase"]


def midnight(day: datetime) -> datetime:
    return day.replace(hour=0, minute=0, second=0, microsecond=0)


def build_events(now: datetime, seed: int = 7) -> list[Sent]:
    """Sessions over 100 days, boundary cases, midnight crossings and live traffic."""
    rng = random.Random(seed)
    today = midnight(now)
    used: set[datetime] = set()

    def unique(t: datetime) -> datetime:
        t = t.replace(microsecond=(t.microsecond // 1000) * 1000)
        while t in used:  # distinct times keep "latest 20" unambiguous
            t -= timedelta(milliseconds=1)
        used.add(t)
        return t

    events: list[Sent] = []
    for n in range(160):
        offset = rng.randrange(0, 100)
        day = today - timedelta(days=offset)
        span = (now - timedelta(minutes=20) - day).total_seconds() if offset == 0 else 86000
        if span < 60:
            continue
        start = unique(day + timedelta(seconds=rng.uniform(0, span - 40)))
        session = f"s{n}" if rng.random() > 0.1 else ""
        visitor = f"v{rng.randrange(40)}" if rng.random() > 0.1 else ""
        browser, device = rng.choice(BROWSERS), rng.choice(DEVICES)
        t = start
        for _ in range(rng.choice([1, 1, 2, 3, 5])):
            events.append(
                Sent(
                    "pageview",
                    t,
                    rng.choice(PATHS),
                    rng.choice(REFERRERS),
                    session,
                    visitor,
                    browser,
                    device,
                )
            )
            t = unique(t + timedelta(seconds=rng.uniform(1, 6)))
        if rng.random() < 0.5:
            events.append(Sent(rng.choice(NAMES), t, "", "", session, visitor, browser, device))
            t = unique(t + timedelta(seconds=rng.uniform(1, 6)))
        if rng.random() < 0.7:
            meta: dict[str, Any] = {}
            roll = rng.random()
            if roll < 0.4:
                meta["durationMs"] = rng.choice([0, 1500, 2500.5, 61_000])
            elif roll < 0.5:
                meta["durationMs"] = -5  # not a duration: falls back to the session's first event
            elif roll < 0.6:
                meta["durationMs"] = "long"
            events.append(Sent("session_end", t, "", "", session, visitor, browser, device, meta))

    for days in (7, 30):
        first = today - timedelta(days=days - 1)
        events.append(
            Sent(
                "pageview",
                unique(first),
                "/edge-in",
                "",
                f"edge{days}",
                "edge-v",
                "Chrome",
                "desktop",
            )
        )
        events.append(
            Sent(
                "pageview",
                unique(first - timedelta(milliseconds=1)),
                "/edge-out",
                "",
                f"edge{days}",
                "edge-v",
                "Chrome",
                "desktop",
            )
        )
    # A session crossing midnight, ending without a stated duration.
    eve = today - timedelta(days=3)
    events.append(
        Sent(
            "pageview",
            unique(eve - timedelta(seconds=5)),
            "/late",
            "",
            "night",
            "owl",
            "Firefox",
            "mobile",
        )
    )
    events.append(
        Sent(
            "pageview",
            unique(eve + timedelta(seconds=3)),
            "/later",
            "",
            "night",
            "owl",
            "Firefox",
            "mobile",
        )
    )
    events.append(
        Sent(
            "session_end",
            unique(eve + timedelta(seconds=10)),
            "",
            "",
            "night",
            "owl",
            "Firefox",
            "mobile",
        )
    )
    # Live traffic: the last five minutes, and just outside them.
    for i, minutes in enumerate((1, 2, 4, 9)):
        events.append(
            Sent(
                "pageview",
                unique(now - timedelta(minutes=minutes)),
                "/live",
                "",
                f"live{i}",
                f"live-v{i}",
                "Safari",
                "mobile",
            )
        )
    return events


def send(client, key: str, events: list[Sent]) -> None:
    for i in range(0, len(events), 100):
        batch = [e.payload() for e in events[i : i + 100]]
        response = client.post("/api/collect", json={"events": batch}, headers={"x-api-key": key})
        assert response.status_code == 202, response.text
        assert response.json() == {"accepted": len(batch)}


def fetch(client, project_id: str, days: int | None = None, user: str = "alice") -> dict[str, Any]:
    query = f"projectId={project_id}" + (f"&days={days}" if days else "")
    response = client.get(f"/api/dashboard?{query}", headers=auth(user))
    assert response.status_code == 200, response.text
    result = response.json()
    # dataThrough is not in the reference model: its own checks are in tests/test_loader.py.
    # Nothing is pending here (the client loads each collect), so it is an instant of today.
    through = result.pop("dataThrough")
    assert ISO_MS.match(through), through
    assert abs(datetime.fromisoformat(through) - datetime.now(UTC)) < timedelta(days=1)
    return result


ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def without_ids(result: dict[str, Any]) -> dict[str, Any]:
    for event in result["recentEvents"]:
        assert UUID.match(event.pop("id"))
    return result


@pytest.fixture
def now() -> datetime:
    current = datetime.now(UTC)
    if current - midnight(current) < timedelta(minutes=30):
        pytest.skip("too close to midnight UTC for a stable day window")
    return current


def test_dashboard_matches_reference_for_every_window(client, now):
    project_id, key = new_project(client)
    _other_project, other_key = new_project(client, user="bob")
    events = build_events(now)
    send(client, key, events)
    send(client, other_key, build_events(now, seed=99))  # another tenant in the same tables

    for days in (1, 7, 14, 30, 90):
        expected = dashboard(events, now, days)
        assert without_ids(fetch(client, project_id, days)) == expected, f"days={days}"
    assert without_ids(fetch(client, project_id)) == dashboard(events, now, 14)  # default


def test_empty_project_has_zeroed_dashboard(client, now):
    project_id, _ = new_project(client)
    result = fetch(client, project_id, 30)
    assert result == dashboard([], now, 30)
    assert len(result["timeline"]) == 30 and len(result["hourlyHeatmap"]) == 24
    assert result["summary"]["bounceRate"] == 0 and result["liveVisitors"] == 0


def test_top_lists_break_ties_by_key_and_stop_at_ten(client, now):
    project_id, key = new_project(client)
    at = now - timedelta(minutes=10)
    paths = [f"/p{i:02d}" for i in range(12)]
    events = [Sent("pageview", at - timedelta(seconds=i), path) for i, path in enumerate(paths)]
    events += [Sent("pageview", at - timedelta(seconds=30 + i), "/z-most") for i in range(2)]
    send(client, key, events)
    top = fetch(client, project_id, 1)["topPaths"]
    assert top[0] == {"path": "/z-most", "views": 2}
    assert [row["path"] for row in top[1:]] == paths[:9]


def test_lists_sharing_one_scan_break_ties_and_stop_at_ten(client, now):
    """Event names share a scan with the timeline, browsers one with device types: each list
    still holds its own top ten, ties by key, and the timeline every day of the window."""
    project_id, key = new_project(client)
    at = now - timedelta(minutes=10)
    events = [
        Sent(
            f"e{i:02d}",
            at - timedelta(days=i % 3, seconds=i),
            browser=f"B{i:02d}",
            device_type=f"d{i % 12:02d}",
        )
        for i in range(13)
    ]
    events += [Sent("z-most", at, browser="Z-most", device_type="z-most") for _ in range(2)]
    send(client, key, events)
    result = fetch(client, project_id, 3)
    expected = dashboard(events, now, 3)
    assert result["eventBreakdown"] == expected["eventBreakdown"]
    assert [row["name"] for row in result["eventBreakdown"]] == ["z-most"] + [
        f"e{i:02d}" for i in range(9)
    ]
    assert [row["browser"] for row in result["browserBreakdown"]][:2] == ["Z-most", "B00"]
    assert result["browserBreakdown"] == expected["browserBreakdown"]
    assert [row["deviceType"] for row in result["deviceBreakdown"]][:2] == ["d00", "z-most"]
    assert result["deviceBreakdown"] == expected["deviceBreakdown"]
    assert len(result["deviceBreakdown"]) == 10
    assert result["timeline"] == expected["timeline"]


def test_session_duration_from_first_event_in_window(client, now):
    """A session_end without durationMs measures from its session's first event in the window."""
    project_id, key = new_project(client)
    today = midnight(now)
    events = [
        Sent("pageview", today - timedelta(hours=1), "/", session_id="s", visitor_id="v"),
        Sent("pageview", today + timedelta(minutes=1), "/", session_id="s", visitor_id="v"),
        Sent("session_end", today + timedelta(minutes=2), session_id="s", visitor_id="v"),
    ]
    send(client, key, events)
    assert fetch(client, project_id, 1)["summary"]["avgSessionDurationMs"] == 60_000
    assert fetch(client, project_id, 2)["summary"]["avgSessionDurationMs"] == 3_720_000


def test_events_of_other_tenants_never_count(client, now):
    project_id, _ = new_project(client)
    _, other_key = new_project(client, user="bob")
    send(client, other_key, build_events(now, seed=3))
    assert fetch(client, project_id, 90) == dashboard([], now, 90)


def test_session_end_sums_come_from_the_projection_and_stay_exact_across_merges(client, now):
    """The session_end sums are read from session_days' per-day projection (day_sums, schema
    019, as sessions_daily's of schemas 004 and 007), equal the sums over its rows, and stay
    exact when its parts merge (the projection is rebuilt)."""
    project_id, key = new_project(client)
    events = build_events(now, seed=11)
    send(client, key, events)
    query = Query(project_id, 90, now)
    storage = client.app.state.storage
    table = "session_days" + ("_local" if storage.cluster else "")  # where the rows are
    sql = dashboard_sql(query)["session_ends"].replace(".session_days ", f".{table} ")
    params = parameters(query)
    plan = "\n".join(row[0] for row in stored(client, f"EXPLAIN projections = 1 {sql}", **params))
    assert "ReadFromMergeTree (day_sums)" in plan

    def sums(use_projection: int) -> list[tuple[Any, ...]]:
        setting = f" SETTINGS optimize_use_projections = {use_projection}"
        return stored(client, sql + setting, **params)

    assert sums(1) == sums(0)
    stored(client, f"OPTIMIZE TABLE {{db}}.{table} FINAL")
    parts = stored(
        client,
        "SELECT countIf(p.name != '') = count() FROM system.parts AS t "
        "LEFT JOIN (SELECT parent_name AS part, name FROM system.projection_parts "
        "  WHERE database = {d:String} AND table = {t:String} AND active) AS p "
        "ON p.part = t.name "
        "WHERE t.database = {d:String} AND t.table = {t:String} AND t.active "
        # A project's deletion (a mutation) can empty a part: it has no rows to project and is
        # removed by the next merge or cleanup.
        "AND t.rows > 0",
        d=storage.database,
        t=table,
    )
    assert parts == [(1,)]  # every merged part has its projection rebuilt
    assert sums(1) == sums(0)
    for days in (1, 7, 90):
        assert without_ids(fetch(client, project_id, days)) == dashboard(events, now, days)


def test_durations_no_clock_gives_still_answer_exactly(client, now):
    """A visitor can send any double as a session_end's durationMs. 1e29 ms has 30 digits (more
    than decimal's default context holds) and two of 1.797e308 ms sum past the largest double:
    the dashboard, its filtered and compared forms and the v2 query answer 200 with the
    reference model's numbers, never a 500."""
    project_id, key = new_project(client)
    today = midnight(now)
    events = []
    for i, (day, duration) in enumerate(((1, 1e29), (0, 1.797e308), (0, 1.797e308), (0, 2.5))):
        at = today - timedelta(days=day) + timedelta(minutes=i + 1)
        sid = f"s{i}"
        events.append(Sent("pageview", at, "/a", session_id=sid, visitor_id=sid))
        events.append(
            Sent(
                "session_end",
                at + timedelta(seconds=1),
                "/a",
                session_id=sid,
                visitor_id=sid,
                metadata={"durationMs": duration},
            )
        )
    send(client, key, events)
    for days in (1, 2):
        want = dashboard(events, now, days)["summary"]["avgSessionDurationMs"]
        assert fetch(client, project_id, days)["summary"]["avgSessionDurationMs"] == want
    assert fetch(client, project_id, 2)["summary"]["avgSessionDurationMs"] > 10**300
    assert fetch(client, project_id, 1)["summary"]["avgSessionDurationMs"] == (
        (2 * int(sys.float_info.max) + 3) // 6  # the sum saturates; a third of it, half up
    )
    base = f"/api/dashboard?projectId={project_id}&days=1"
    for extra in ("&compare=previous_period", '&filters=[["is","path",["/a"]]]'):
        response = client.get(base + extra, headers=auth("alice"))
        assert response.status_code == 200, (extra, response.text)
    compared = client.get(base + "&compare=previous_period", headers=auth("alice")).json()
    # 1e29 the day before, ~6e307 today: a change of ~6e280 percent, a number.
    assert compared["comparison"]["change"]["avgSessionDurationMs"] > 10**280
    days = [(now - timedelta(days=1)).date().isoformat(), now.date().isoformat()]
    body = {"site_id": project_id, "metrics": ["visit_duration", "events"], "date_range": days}
    response = client.post("/api/v2/query", json=body, headers=auth("alice"))
    assert response.status_code == 200, response.text
    want = dashboard(events, now, 2)["summary"]["avgSessionDurationMs"]
    assert response.json()["results"][0]["metrics"] == [want, len(events)]

"""Local days and hours by one set of zone rules: the storage engine's (domain/zones.py).

Python's ``zoneinfo`` read the system's tz database (Debian 12: 2025b) while the engine puts
events in local days and hours by its own: for Vancouver, Edmonton, Casablanca and a few more
they disagree, and one dashboard answer counted 3 events in its summary and timeline and 5 in its
heatmap, its breakdowns and the query API, for the same day. The tests below fail that way when
Python's rules are used for the window; they pass when the engine's are."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from conftest import auth, new_project, stored
from tally.domain import zones
from tally.domain.zones import EngineZone
from tally.query import resolve_zone
from tally.storage.zones import engine_offsets

# Zones whose rules changed lately (one tz database or the other disagrees with the engine
# here), and zones with odd offsets, DST at midnight or half-hour DST.
ZONES = [
    "America/Vancouver",
    "America/Edmonton",
    "America/Winnipeg",
    "America/Havana",
    "America/Inuvik",
    "Africa/Casablanca",
    "Africa/El_Aaiun",
    "America/New_York",
    "America/St_Johns",
    "America/Santiago",
    "Asia/Kathmandu",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "Pacific/Apia",
    "Europe/London",
    "UTC",
]


def python_transitions(name: str, first: datetime, last: datetime) -> tuple[int, list]:
    """A zone's offset at ``first`` and its changes until ``last``, by Python's zoneinfo,
    found minute by minute around each hourly change: an input for EngineZone that does not
    come from the engine, to check EngineZone's datetime semantics against zoneinfo's."""
    zone = ZoneInfo(name)

    def offset(t: datetime) -> int:
        return int(t.astimezone(zone).utcoffset().total_seconds())

    changes, t, before = [], first, offset(first)
    while t < last:
        t += timedelta(hours=1)
        now = offset(t)
        if now != before:
            m = t - timedelta(hours=1)
            while offset(m) == before:
                m += timedelta(minutes=1)
            changes.append((int(m.timestamp()), now))
            before = now
    return offset(first), changes


@pytest.mark.parametrize(
    "name", ["America/New_York", "Australia/Lord_Howe", "Africa/Casablanca", "America/Santiago"]
)
def test_an_engine_zone_reads_local_times_as_zoneinfo_does(name):
    """Gaps and repeated hours (fold 0 and 1), both directions of conversion, every 15 minutes
    of two years and each minute around every change of six: EngineZone built from zoneinfo's
    own transitions answers what zoneinfo answers."""
    first = datetime(2021, 1, 1, tzinfo=UTC)
    last = datetime(2027, 1, 1, tzinfo=UTC)
    built = python_transitions(name, first, last)
    engine_like = EngineZone(name, built, ZoneInfo("UTC"))
    python = ZoneInfo(name)
    walls = [datetime(2023, 1, 1) + timedelta(minutes=15 * i) for i in range(2 * 35_064)]
    for t, _ in built[1]:
        around = datetime.fromtimestamp(t, UTC).replace(tzinfo=None)
        walls += [around + timedelta(minutes=m) for m in range(-150, 150)]
    assert built[1], "no change found: the check would prove nothing"
    for wall in walls:
        for fold in (0, 1):
            ours = wall.replace(fold=fold, tzinfo=engine_like)
            theirs = wall.replace(fold=fold, tzinfo=python)
            assert ours.utcoffset() == theirs.utcoffset(), (wall, fold)
            assert ours.astimezone(UTC) == theirs.astimezone(UTC), (wall, fold)
        instant = wall.replace(tzinfo=UTC)
        ours, theirs = instant.astimezone(engine_like), instant.astimezone(python)
        assert (ours.replace(tzinfo=None), ours.fold) == (theirs.replace(tzinfo=None), theirs.fold)


def test_local_midnights_and_today_are_the_engines(client):
    """For every listed zone: each local midnight of 2020-2028 that the queries compute in
    Python is the engine's own (``toDateTime(day, zone)``), and the local date of an instant
    every 6 hours is the engine's ``toDate``. With Python's rules, Vancouver's and Edmonton's
    midnights from November 2026 were an hour off the engine's."""
    storage = client.app.state.storage

    def source(name: str):
        return engine_offsets(storage, name)

    zones.use(source)
    try:
        first = date(2020, 1, 1)
        days = (date(2029, 1, 1) - first).days
        for name in ZONES:
            zone = resolve_zone(name)
            [(midnights, dates)] = storage.query(
                f"""SELECT arrayMap(d -> toUnixTimestamp(toDateTime(toDate('{first}') + d,
                                                                   '{name}')), range({days})),
                           arrayMap(h -> toString(toDate(toDateTime(
                               toUnixTimestamp(toDateTime('{first}', 'UTC')) + h * 21600,
                               '{name}'))), range({days * 4}))"""
            )
            ours = [
                int(datetime.combine(first + timedelta(days=d), time(0), tzinfo=zone).timestamp())
                for d in range(days)
            ]
            wrong = [first + timedelta(days=d) for d in range(days) if ours[d] != midnights[d]]
            assert not wrong, (name, wrong[:3])
            start = datetime.combine(first, time(0), tzinfo=UTC)
            local = [
                str((start + timedelta(hours=6 * h)).astimezone(zone).date())
                for h in range(days * 4)
            ]
            assert local == list(dates), name
    finally:
        zones.release(source)


@pytest.mark.parametrize("zone", ["America/Vancouver", "Africa/Casablanca", "America/Edmonton"])
def test_one_answer_counts_one_day_by_one_set_of_rules(client, user, zone):
    """Events an hour apart around the local midnights of 2026-11-25 in a zone whose rules
    changed lately: the summary, the timeline, the heatmap, a breakdown and the query API all
    count the events the engine puts on that local day, the same number."""
    project_id, key = new_project(client, user)
    patched = client.patch(
        "/api/projects", json={"projectId": project_id, "timezone": zone}, headers=auth(user)
    )
    assert patched.status_code == 200, patched.text
    day = date(2026, 11, 25)
    times = [
        datetime.combine(day, time(0), tzinfo=UTC) + timedelta(minutes=30 + 60 * i)
        for i in range(-12, 36)
    ]
    events = [
        {
            "name": "pageview",
            "path": f"/p{i % 3}",
            "sessionId": f"s{i}",
            "visitorId": f"v{i}",
            "occurredAt": t.isoformat().replace("+00:00", "Z"),
        }
        for i, t in enumerate(times)
    ]
    answer = client.post("/api/collect", json={"events": events}, headers={"x-api-key": key})
    assert answer.status_code == 202, answer.text
    [(expected,)] = stored(
        client,
        "SELECT count() FROM {db}.events WHERE project_id = {p:String} "
        "AND toDate(occurred_at, {tz:String}) = {d:Date}",
        p=project_id,
        tz=zone,
        d=day,
    )
    assert 0 < expected < len(events)
    asked = f"projectId={project_id}&from={day}&to={day}"
    board = client.get(f"/api/dashboard?{asked}", headers=auth(user)).json()
    assert board["summary"]["totalEvents"] == expected
    assert sum(point["events"] for point in board["timeline"]) == expected
    assert sum(hour["count"] for hour in board["hourlyHeatmap"]) == expected
    rows = client.get(f"/api/breakdown?{asked}&by=path", headers=auth(user)).json()["rows"]
    assert sum(row["events"] for row in rows) == expected
    query = {"site_id": project_id, "metrics": ["events"], "date_range": [str(day), str(day)]}
    v2 = client.post("/api/v2/query", json=query, headers=auth(user)).json()
    assert v2["results"][0]["metrics"] == [expected]


def test_an_app_that_stops_leaves_the_engine_rules_of_another_in_use():
    """Two apps in one process (the tests run several, each with its own start and stop): the
    one that stops first took the engine's rules away from the other, whose answers then put a
    Vancouver day's bounds an hour off the engine's (3 of this file's tests, under xdist)."""
    calls: list[str] = []

    def first(name: str):
        calls.append(f"first {name}")
        return (-28_800, [])

    def second(name: str):
        calls.append(f"second {name}")
        return (-25_200, [])

    before = zones._current()  # an app of this test process may be running
    zones.use(first)
    try:
        zones.use(second)
        assert zones.zone("America/Vancouver").utcoffset(datetime(2026, 12, 1)) == timedelta(
            hours=-7
        )
        zones.release(second)
        vancouver = zones.zone("America/Vancouver")
        assert isinstance(vancouver, EngineZone)
        assert vancouver.utcoffset(datetime(2026, 12, 1)) == timedelta(hours=-8)
        assert calls == ["second America/Vancouver", "first America/Vancouver"]
    finally:
        zones.release(first)
    assert zones._current() is before


def test_a_zone_the_engine_failed_to_read_once_is_read_again():
    """A ClickHouse server that does not answer at a zone's first request: that request gets
    Python's rules, and the next the engine's (the failure was kept for the process before)."""
    answers: list[object] = [ConnectionError("no answer"), (-25_200, [])]

    def flaky(name: str):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    zones.use(flaky)
    try:
        assert not isinstance(zones.zone("America/Edmonton"), EngineZone)
        edmonton = zones.zone("America/Edmonton")
        assert isinstance(edmonton, EngineZone)
        assert edmonton.utcoffset(datetime(2026, 12, 1)) == timedelta(hours=-7)
        assert zones.zone("America/Edmonton") is edmonton and not answers
    finally:
        zones.release(flaky)

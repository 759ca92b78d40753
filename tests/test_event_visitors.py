"""Schema 020's ``event_visitors`` and the decider's choice of it (query/decider.py): the breakdown
by event read from it (with ``events_quarter`` for the counts) equals the raw table's answer and
the reference model's, for the same data, in zones off UTC midnight, over from/to ranges, across a
calendar quarter's start, with bots counted or not, with its rows stored twice, and after expired
events left buckets in a kept row. Also: the upgrade from schema 019 fills it from the events
stored before, and a deleted project's rows leave it."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, date, datetime, timedelta

import pytest

import reference_filters as ref
from conftest import migrate_before
from tally.domain.filters import parse_filters
from tally.query import Query
from tally.query.breakdown import breakdown_parameters
from tally.query.decider import EVENT_ROLLUP, EVENT_ROLLUP_DAYS, RAW, breakdown_table
from tally.query.names import breakdown_sql
from tally.storage.client import Storage, parse_url
from tally.storage.migrate import migrate
from tally.storage.purge import purge_project
from test_filters_wired import sent, traffic
from test_sessions_rollup import _insert, _raw, _reference, _rows, range_queries


def _rollup(storage: Storage, query: Query) -> list[dict]:
    sql = breakdown_sql(query).replace("{db}", storage.database)
    assert "event_visitors" in sql and ".events " not in sql and ".events\n" not in sql
    return _rows(asyncio.run(storage.aquery(sql, breakdown_parameters(query))))


def _all_three(storage: Storage, events, query: Query) -> list[dict]:
    got = _rollup(storage, query)
    assert got == _raw(storage, query) == _reference(events, query, []), (query.tz, query)
    return got


@pytest.fixture()
def storage(chdb_path):
    storage = Storage(parse_url(f"chdb://{chdb_path}?database=z_{uuid.uuid4().hex[:10]}"), 4)
    migrate(storage)
    yield storage
    storage.close()


def _tenant(storage: Storage, seed: int) -> tuple[str, datetime, list]:
    now = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=2)
    project, other = uuid.uuid4().hex[:24], uuid.uuid4().hex[:24]
    events = traffic(now, seed=seed)
    _insert(storage, project, sent(events))
    _insert(storage, other, sent(traffic(now, seed=seed + 1)))  # a neighbour in the same tables
    return project, now, events


def test_the_rollup_and_the_raw_table_give_the_same_rows(storage):
    project, now, events = _tenant(storage, 51)
    checked = 0
    for tz in (
        "UTC",
        "Asia/Kathmandu",
        "America/New_York",
        "Australia/Lord_Howe",
        "Pacific/Chatham",
    ):
        for days in (1, 3, 7, 30, 90):
            for bots in (True, False):
                query = Query(project, days, now, tz=tz, exclude_bots=bots, dimension="event",
                              limit=1000)  # fmt: skip
                checked += bool(_all_three(storage, events, query))
    assert checked > 40  # not vacuous
    query = Query(project, 30, now, dimension="event", limit=1)
    assert len(_all_three(storage, events, query)) == 1  # the limit


def test_closed_ranges_in_each_zone_the_same_either_way(storage):
    project, now, events = _tenant(storage, 53)
    zones = ("UTC", "Asia/Kathmandu", "Australia/Lord_Howe", "America/New_York")
    for query in range_queries(project, now, zones, lambda bots: ["event"]):
        _all_three(storage, events, query)


def test_rows_stored_twice_and_a_visitor_in_two_quarters_count_once(storage):
    """A calendar quarter's start (UTC) splits a visitor's rows in two partitions, and rows
    written again (parts not merged, a backfill run twice) repeat the pairs: neither counts a
    visitor twice."""
    project = uuid.uuid4().hex[:24]
    edge = datetime(2026, 10, 1, tzinfo=UTC)
    events = [
        ref.Ev("signup", edge - timedelta(minutes=10), session_id="s1", visitor_id="q"),
        ref.Ev("signup", edge + timedelta(minutes=10), session_id="s1", visitor_id="q"),
        ref.Ev("pageview", edge - timedelta(days=40), path="/a", session_id="s2", visitor_id="q"),
        ref.Ev("pageview", edge + timedelta(days=20), path="/a", session_id="s3", visitor_id="r"),
        ref.Ev("signup", edge + timedelta(days=20, seconds=1), session_id="s3", visitor_id="r"),
        ref.Ev("signup", edge + timedelta(days=21), session_id="s4", visitor_id=""),
    ]
    _insert(storage, project, sent(events))
    db = storage.database
    quarters = f"SELECT uniqExact(quarter) FROM {db}.event_visitors WHERE project_id = {{p:String}}"
    assert storage.query(quarters, {"p": project}) == [(2,)]
    now = edge + timedelta(days=30)
    for first, last in (
        (date(2026, 9, 1), date(2026, 10, 30)),
        (date(2026, 9, 30), date(2026, 10, 1)),
    ):
        for tz in ("UTC", "Asia/Kathmandu", "America/New_York"):
            query = Query(project, (last - first).days + 1, now, tz=tz, dimension="event",
                          limit=1000, first=first, last=last)  # fmt: skip
            before = _all_three(storage, events, query)
            assert before
            storage.command(
                f"INSERT INTO {db}.event_visitors SELECT * FROM {db}.event_visitors "
                "WHERE project_id = {p:String}",
                {"p": project},
            )
            assert _rollup(storage, query) == before
    wide = Query(
        project, 61, now, dimension="event", first=date(2026, 8, 1), last=date(2026, 10, 30)
    )
    signup = next(r for r in _all_three(storage, events, wide) if r["value"] == "signup")
    assert signup == {"value": "signup", "visitors": 2, "pageviews": 0, "events": 4}


def test_buckets_of_expired_events_in_a_kept_row_do_not_count(storage):
    """Under a retention TTL a (name, visitor) row stays while its latest bucket is kept, with
    the buckets of its expired events: they are not counted (the rollup reads from the oldest
    bucket events_quarter holds), as the raw table, whose events are gone, does not."""
    project, now, events = _tenant(storage, 57)
    cutoff = (now - timedelta(days=5)).replace(hour=0, minute=0, second=0)
    db = storage.database
    for table, column in (("events", "occurred_at"), ("events_quarter", "bucket")):
        storage.command(
            f"ALTER TABLE {db}.{table} DELETE WHERE project_id = {{p:String}} "
            f"AND {column} < {{c:DateTime('UTC')}} SETTINGS mutations_sync = 2",
            {"p": project, "c": cutoff},
        )
    kept = [e for e in events if e.occurred_at >= cutoff]
    query = Query(project, 30, now, dimension="event", limit=1000)
    got = _all_three(storage, kept, query)
    assert got != _reference(events, query, [])  # the expired events did count before


def test_the_decider_reads_the_rollup_from_four_weeks_on():
    now = datetime.now(UTC)
    assert EVENT_ROLLUP_DAYS == 28
    assert breakdown_table(Query("p", 90, now, dimension="event")) == EVENT_ROLLUP
    assert breakdown_table(Query("p", 28, now, dimension="event")) == EVENT_ROLLUP
    assert breakdown_table(Query("p", 27, now, dimension="event")) == RAW
    year = Query("p", 366, now, dimension="event", first=date(2025, 1, 1), last=date(2026, 1, 1))
    assert breakdown_table(year) == EVENT_ROLLUP
    filtered = parse_filters('[["is","event",["signup"]]]')
    assert breakdown_table(Query("p", 90, now, dimension="event", filters=filtered)) == RAW
    assert breakdown_table(Query("p", 90, now, dimension="path")) == RAW


def test_the_served_breakdown_reads_the_rollup_and_answers_as_the_reference(client):
    """GET /api/breakdown?by=event over 30 days, through the app, equals the reference."""
    from test_sessions_rollup import tenant_beside_another

    project, now, events = tenant_beside_another(client, 59)
    query = Query(project, 30, now, dimension="event", limit=10)
    assert breakdown_table(query) == EVENT_ROLLUP
    from tally.storage.breakdown import fetch_breakdown

    got = _rows(asyncio.run(fetch_breakdown(client.app.state.storage, query)))
    assert got == _reference(events, query, []) and got


def test_upgrade_from_019_fills_the_rollup_and_purge_empties_it(chdb_path):
    storage = Storage(parse_url(f"chdb://{chdb_path}?database=z_{uuid.uuid4().hex[:10]}"), 4)
    db = storage.database
    try:
        migrate_before(storage, 20)
        now = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=2)
        project, other = "a" * 24, "b" * 24
        events = traffic(now, seed=61)
        before = sent(events)
        _insert(storage, project, before[: len(before) // 2])  # written by schema 019
        _insert(storage, other, sent(traffic(now, seed=62)))
        assert "020_event_visitors" in migrate(storage)
        _insert(storage, project, before[len(before) // 2 :])  # through the view
        assert migrate(storage) == []
        for tz in ("UTC", "Asia/Kathmandu"):
            for days in (7, 30):
                query = Query(project, days, now, tz=tz, dimension="event", limit=1000)
                assert _all_three(storage, events, query), (tz, days)
        count = f"SELECT count() FROM {db}.event_visitors WHERE project_id = {{p:String}}"
        assert storage.query(count, {"p": project})[0][0] > 0
        assert "event_visitors" in purge_project(storage, project)
        assert storage.query(count, {"p": project}) == [(0,)]
        assert storage.query(count, {"p": other})[0][0] > 0  # the neighbour keeps its rows
    finally:
        storage.close()

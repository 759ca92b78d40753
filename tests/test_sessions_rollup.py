"""Schema 008's ``sessions_quarter`` and the decider's per-filter choice (query/decider.py): a
session dimension's breakdown read from the rollup equals the raw table's answer and the
reference model's (tests/reference_filters.py), for the same data, with and without session
filters, in zones off UTC midnight, over from/to ranges, with bots counted or not. Also: the
upgrade from schema 007 fills the rollup from the events stored before (once), and a deleted
project's rows leave it."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

import reference_filters as ref
from conftest import auth, migrate_before, new_project
from reference import Sent
from tally.domain.filters import DIMENSIONS, parse_filters
from tally.domain.metrics import stated_total
from tally.query import Query, decide, filtered, onescan
from tally.query.breakdown import breakdown_parameters, breakdown_sql, raw_breakdown_sql
from tally.query.decider import AUDIENCE_COLUMNS, SESSIONS_ROLLUP, breakdown_table
from tally.storage.breakdown import fetch_breakdown
from tally.storage.client import Storage, parse_url
from tally.storage.migrate import load_migrations, migrate
from tally.storage.purge import purge_project
from test_filters_wired import as_tuple, got_dashboard, sent, traffic
from test_local_time import COLUMNS, _duration, store

SESSION_DIMS = [name for name, d in DIMENSIONS.items() if d.is_session]
EVENT_DIMS = [name for name, d in DIMENSIONS.items() if not d.is_session]


def exact_sessions(rows: list[tuple]) -> list[tuple]:
    """A session metrics row (sessions, with a pageview, bounced, ends, stated duration pairs,
    other spans) with its durations as one exact total: paths sum the pairs differently (per
    exponent, or per session in 10^-20 ms), to the same number."""
    return [(*row[:4], stated_total(row[4]) + int(row[5])) for row in rows]


def _rows(rows) -> list[dict]:
    return [
        {"value": v, "visitors": int(u), "pageviews": int(p), "events": int(e)}
        for v, u, p, e in rows
    ]


def _rollup(storage: Storage, query: Query) -> list[dict]:
    assert breakdown_table(query) == SESSIONS_ROLLUP
    sql = breakdown_sql(query).replace("{db}", storage.database)
    assert "sessions_quarter" in sql and ".events" not in sql
    return _rows(asyncio.run(storage.aquery(sql, breakdown_parameters(query))))


def _raw(storage: Storage, query: Query) -> list[dict]:
    sql = filtered.breakdown_sql(query, rollup=False).replace("{db}", storage.database)
    assert "sessions_quarter" not in sql
    return _rows(asyncio.run(storage.aquery(sql, filtered.parameters(query))))


def _reference(events, query: Query, raw: list) -> list[dict]:
    return ref.breakdown(
        events,
        query.dimension,
        as_tuple(raw) if raw else [],
        zone=query.zone,
        first_day=query.first_day,
        last_day=query.last_day,
        now=query.now,
        limit=query.limit,
        exclude_bots=query.exclude_bots,
    )


def each_operator(events, dims) -> list[list]:
    """A filter of each operator on each of ``dims``, its value from the data (and one that
    looks like SQL)."""
    out: list[list] = []
    for name in dims:
        column = DIMENSIONS[name].column
        present = sorted({getattr(e, column) for e in events if getattr(e, column)})
        value = present[len(present) // 2] if present else "none"
        for op in ("is", "is_not", "contains", "contains_not"):
            vals = [value, "' OR ''='"] if op.startswith("is") else [value[1:3].upper() or value]
            out.append([[op, name, vals]])
    return out


def session_filters(events) -> list[list]:
    """Each session dimension with each operator, values from the data; and two combined."""
    out = each_operator(events, SESSION_DIMS)
    out.append([["is", "source", ["日本語", "x' OR 1=1 --"]], ["is_not", "exitPage", ["/"]]])
    # The empty value: sessions without one (no utm_medium, no pageview) match it.
    out.append([["is", "utmMedium", ["", "nope"]]])
    out.append([["is_not", "entryPage", [""]], ["contains_not", "utmSource", [""]]])
    out.append([["contains", "exitPage", [""]]])
    return out


def tenant_beside_another(client, seed: int) -> tuple[str, datetime, list]:
    """A project's traffic (``seed``) stored beside another user's (``seed + 1``)."""
    project_id, _ = new_project(client)
    now = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=2)
    events = traffic(now, seed=seed)
    store(client, project_id, sent(events))
    other, _ = new_project(client, user="bob")
    store(client, other, sent(traffic(now, seed=seed + 1)))  # another tenant in the same tables
    return project_id, now, events


@pytest.fixture(scope="module")
def site(client):
    return tenant_beside_another(client, 23)


def rollup_equals_raw(client, site, dims, filter_sets, rollup) -> int:
    """For each of ``dims`` unfiltered and each filter set (by a dimension of ``dims`` in turn),
    in three zones: ``rollup``'s rows = the raw table's = the reference model's. Returns how
    many answers had rows."""
    project_id, now, events = site
    storage = client.app.state.storage
    checked = 0
    cases = [([], by) for by in dims]
    cases += [(raw, dims[i % len(dims)]) for i, raw in enumerate(filter_sets)]
    for i, (raw, by) in enumerate(cases):
        filters = parse_filters(json.dumps(raw))
        tz = ("UTC", "Asia/Kathmandu", "America/New_York")[i % 3]
        query = Query(project_id, 7, now, tz=tz, filters=filters, dimension=by, limit=1000)
        got = rollup(storage, query)
        assert got == _raw(storage, query) == _reference(events, query, raw), (raw, by, tz)
        checked += bool(got)
    return checked


def test_the_rollup_and_the_raw_table_give_the_same_rows(client, site):
    filter_sets = session_filters(site[2])
    assert rollup_equals_raw(client, site, SESSION_DIMS, filter_sets, _rollup) > 25


def range_queries(project_id: str, now: datetime, zones, dims) -> Iterator[Query]:
    """Breakdowns over closed ranges ending yesterday in each zone: four days with bots left out
    (by ``dims(True)``), one day with bots counted (by ``dims(False)``)."""
    for tz in zones:
        last = now.astimezone(ZoneInfo(tz)).date() - timedelta(days=1)
        for first, bots in ((last - timedelta(days=3), True), (last, False)):
            for by in dims(bots):
                yield Query(
                    project_id,
                    (last - first).days + 1,
                    now,
                    tz=tz,
                    exclude_bots=bots,
                    dimension=by,
                    limit=1000,
                    first=first,
                    last=last,
                )


def ranges_equal(client, site, zones, dims, rollup) -> None:
    """Over :func:`range_queries`: ``rollup``'s rows = the raw table's = the reference model's."""
    project_id, now, events = site
    storage = client.app.state.storage
    for query in range_queries(project_id, now, zones, dims):
        got = rollup(storage, query)
        assert got == _raw(storage, query) == _reference(events, query, []), (query.tz, query)


def test_ranges_zones_and_bots_the_same_either_way(client, site):
    zones = ("UTC", "Asia/Kathmandu", "Australia/Lord_Howe", "America/New_York")
    dims = lambda bots: SESSION_DIMS[::2] if bots else SESSION_DIMS[1::2]  # noqa: E731
    ranges_equal(client, site, zones, dims, _rollup)


def served_as_reference(client, site, cases) -> None:
    """fetch_breakdown (the table the decider names) answers each (filters, by) of ``cases``
    as the reference model, with rows."""
    project_id, now, events = site
    storage = client.app.state.storage
    for raw, by in cases:
        query = Query(project_id, 7, now, filters=parse_filters(json.dumps(raw)), dimension=by)
        got = _rows(asyncio.run(fetch_breakdown(storage, query)))
        assert got == _reference(events, query, raw), (raw, by)
        assert got  # not vacuous


def test_the_served_breakdown_follows_the_decider(client, site):
    """fetch_breakdown reads the table the decider names and answers as the reference."""
    cases = (
        ([["contains", "path", ["blog"]]], "source"),  # an event filter: raw
        ([["is_not", "channel", ["Direct"]]], "country"),  # an event dimension: raw
        ([["is_not", "channel", ["Direct"]]], "entryPage"),  # session on session: rollup
    )
    served_as_reference(client, site, cases)


def test_the_decider_names_a_table_per_filter():
    now = datetime(2026, 5, 26, 12, tzinfo=UTC)

    def table(by: str, raw: list) -> str:
        return breakdown_table(
            Query("p" * 24, 7, now, dimension=by, filters=parse_filters(json.dumps(raw)))
        )

    for by in SESSION_DIMS:
        assert table(by, []) == "sessions_quarter"
        assert table(by, [["is", "source", ["Google"]], ["contains", "entryPage", ["/"]]]) == (
            "sessions_quarter"
        )
        for event_dim in EVENT_DIMS:
            assert table(by, [["is", event_dim, ["x"]]]) == "raw"
    # audience_quarter (tests/test_audience_rollup.py): country, browser, os and deviceType,
    # under filters on those four only.
    for by in EVENT_DIMS:
        audience = by in AUDIENCE_COLUMNS
        assert table(by, []) == ("audience_quarter" if audience else "raw")
        both = [["is", "country", ["DE"]], ["contains", "os", ["win"]]]
        assert table(by, both) == ("audience_quarter" if audience else "raw")
        for other in DIMENSIONS:
            if other not in AUDIENCE_COLUMNS:
                assert table(by, [["is", other, ["x"]]]) == "raw", (by, other)


def test_a_closed_range_reads_raw_edges_at_both_ends():
    now = datetime(2026, 5, 26, 12, tzinfo=UTC)
    day = date(2026, 5, 20)
    utc = decide(Query("p" * 24, 3, now, first=day, last=day + timedelta(days=2)))
    assert (utc.first_utc_day, utc.last_utc_day) == (day, day + timedelta(days=2))
    assert not utc.uses_raw_edge
    ktm = decide(Query("p" * 24, 3, now, tz="Asia/Kathmandu", first=day, last=day + timedelta(2)))
    start = datetime(2026, 5, 19, 18, 15, tzinfo=UTC)
    assert ktm.edge == (start, datetime(2026, 5, 20, tzinfo=UTC))
    assert ktm.end_edge == (datetime(2026, 5, 22, tzinfo=UTC), start + timedelta(days=3))
    assert (ktm.first_utc_day, ktm.last_utc_day) == (day, day + timedelta(days=1))
    # An open window (ending after now) reads the day rollups up to today, whole.
    open_ = decide(Query("p" * 24, 7, now, tz="America/New_York"))
    assert open_.end_edge is None and open_.last_utc_day == now.date()


# --- upgrade from schema 007 ------------------------------------------------------------------
def _insert(storage: Storage, project_id: str, events) -> None:
    rows = []
    for e in events:
        values = {
            "project_id": project_id,
            "name": e.name,
            "occurred_at": e.occurred_at,
            "received_at": e.occurred_at,
            "path": e.path,
            "url": "",
            "referrer": e.referrer,
            "session_id": e.session_id,
            "visitor_id": e.visitor_id,
            "browser": e.browser,
            "os": e.os,
            "device_type": e.device_type,
            "duration_ms": _duration(e),
            "metadata": "{}",
            "ip": "",
            "user_agent": "",
            "key_id": "k",
            "is_bot": int(e.is_bot),
            "source": e.source,
            "channel": e.channel,
            "utm_source": e.utm_source,
            "utm_medium": e.utm_medium,
            "utm_campaign": e.utm_campaign,
            "utm_content": e.utm_content,
            "utm_term": e.utm_term,
            "country": e.country,
        }
        rows.append(values)
    columns = list(rows[0])
    data = [[row[c] for row in rows] for c in columns]
    storage.insert(f"{storage.database}.events", data, columns)
    assert set(COLUMNS) <= set(columns)


def test_upgrade_from_007_fills_the_rollup_once_and_purge_empties_it(chdb_path):
    storage = Storage(parse_url(f"chdb://{chdb_path}?database=z_{uuid.uuid4().hex[:10]}"), 4)
    db = storage.database
    try:
        migrate_before(storage, 8)
        now = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=2)
        project, other = "a" * 24, "b" * 24
        events = traffic(now, seed=31)
        before = [e for e in sent(events)]
        _insert(storage, project, before[: len(before) // 2])
        _insert(storage, other, sent(traffic(now, seed=32)))
        assert "008_sessions_quarter" in migrate(storage)
        _insert(storage, project, before[len(before) // 2 :])  # through the view
        assert migrate(storage) == []  # applied again: the backfill does not run twice
        for by in SESSION_DIMS:
            for tz in ("UTC", "Asia/Kathmandu"):
                query = Query(project, 7, now, tz=tz, dimension=by, limit=1000)
                got = _rollup(storage, query)
                assert got == _raw(storage, query) == _reference(events, query, []), (by, tz)
        count = f"SELECT count() FROM {db}.sessions_quarter WHERE project_id = {{p:String}}"
        assert storage.query(count, {"p": project})[0][0] > 0
        assert "sessions_quarter" in purge_project(storage, project)
        assert storage.query(count, {"p": project}) == [(0,)]
        assert storage.query(count, {"p": other})[0][0] > 0  # the neighbour keeps its rows
    finally:
        storage.close()


def test_a_session_filtered_dashboard_is_the_same_either_way(client, site):
    """The filtered dashboard's session filters: sessions found in sessions_quarter or grouped
    from the raw events, the same rows for every query of the dashboard."""
    project_id, now, _ = site
    storage = client.app.state.storage
    for raw in (
        [["is", "source", ["Google", "日本語"]]],
        [["contains_not", "entryPage", ["BLOG"]], ["contains", "path", ["/"]]],
        [["is_not", "exitPage", ["/"]], ["is", "channel", ["Direct", "Email"]]],
    ):
        query = Query(
            project_id, 7, now, tz="Asia/Kathmandu", filters=parse_filters(json.dumps(raw))
        )
        params = filtered.parameters(query)
        fast = filtered.dashboard_sql(query)
        slow = filtered.dashboard_sql(query, rollup=False)
        for name in fast:
            if name in ("recent", "live"):
                continue  # ties in time may order differently; live is not filtered
            a, b = (
                sorted(
                    asyncio.run(
                        storage.aquery(sql[name].replace("{db}", storage.database), params)
                    ),
                    key=repr,
                )
                for sql in (fast, slow)
            )
            assert "sessions_quarter" not in slow[name]
            assert a == b, (raw, name)
        assert "sessions_quarter" in fast["days"] and fast["days"] != slow["days"]


@contextmanager
def upgraded_halfway(chdb_path, version: int, seed: int) -> Iterator[tuple]:
    """A database as the Tally before schema ``version`` left it, holding half of a tenant's
    traffic (``seed``), then migrated (what ``migrate`` applied), then the other half written
    through the views: (storage, project, now, events, applied)."""
    storage = Storage(parse_url(f"chdb://{chdb_path}?database=u_{uuid.uuid4().hex[:10]}"), 4)
    try:
        migrate_before(storage, version)
        now = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=2)
        project = "c" * 24
        events = traffic(now, seed=seed)
        before = sent(events)
        _insert(storage, project, before[: len(before) // 2])
        applied = migrate(storage)
        _insert(storage, project, before[len(before) // 2 :])
        yield storage, project, now, events, applied
    finally:
        storage.close()


def test_upgrade_to_011_reads_the_visitor_lists_of_rows_written_before(chdb_path):
    """Schema 011's ``visitor_list`` of rows stored by 010 comes from their ``visitors`` state
    (the column's DEFAULT), before and after the operator's MATERIALIZE COLUMN, and rows written
    after the upgrade carry it too: every session breakdown stays the raw table's answer."""
    with upgraded_halfway(chdb_path, 11, seed=33) as (storage, project, now, events, applied):
        db = storage.database
        assert applied[0] == "011_session_visitor_list"

        def check() -> None:
            for by in SESSION_DIMS[::3]:
                query = Query(project, 7, now, tz="Asia/Kathmandu", dimension=by, limit=1000)
                got = _rollup(storage, query)
                assert got == _raw(storage, query) == _reference(events, query, []), by
                assert got

        check()
        storage.command(
            f"ALTER TABLE {db}.sessions_quarter MATERIALIZE COLUMN visitor_list "
            "SETTINGS mutations_sync = 2"
        )
        check()
        differ = storage.query(
            f"SELECT countIf(arraySort(visitor_list) != arraySort(finalizeAggregation(visitors)))"
            f" FROM {db}.sessions_quarter"
        )
        assert differ == [(0,)]


def test_upgrade_to_012_numbers_the_first_values_of_rows_written_before(chdb_path):
    """Schema 012's first-value numbers and ``session_values`` for rows stored by 011 come from
    its backfill (run again: the same answers), rows written after it get them from the view, and
    every session breakdown, a short one with its ties included, stays the raw table's answer and
    the reference model's."""
    with upgraded_halfway(chdb_path, 12, seed=35) as (storage, project, now, events, applied):
        db = storage.database
        assert applied == [m.name for m in load_migrations()[11:]]  # 012 and those after it

        def check() -> None:
            for by in SESSION_DIMS:
                for tz, limit in (("UTC", 1000), ("Asia/Kathmandu", 2)):
                    query = Query(project, 7, now, tz=tz, dimension=by, limit=limit)
                    got = _rollup(storage, query)
                    assert got == _raw(storage, query) == _reference(events, query, []), by
                    assert got
            # The session metrics of filtered views (their session_end events: schema 012).
            for raw in ([["contains", "source", ["o"]]], [["contains", "path", ["/"]]]):
                query = Query(
                    project, 7, now, tz="Asia/Kathmandu", filters=parse_filters(json.dumps(raw))
                )
                params = filtered.parameters(query)
                a, b = (
                    asyncio.run(
                        storage.aquery(
                            onescan.sessions_sql(query, rollup).replace("{db}", db), params
                        )
                    )
                    for rollup in (True, False)
                )
                assert exact_sessions(a) == exact_sessions(b) and a[0][3] > 0, raw

        check()
        (schema,) = [m for m in load_migrations() if m.version == 12]
        for statement in schema.statements(storage.database):
            if statement.lstrip().startswith("INSERT INTO"):
                storage.command(statement)
        check()


def test_events_sent_together_keep_their_order_at_the_same_millisecond(chdb_path):
    """Events sent together without a time are stored at one millisecond. A session's first
    values are still its first event's, and its exit page its last pageview's, in the order
    sent (the reference model's), whichever value's hash is smaller: two sessions send the same
    values in opposite orders. The rollup and the raw table agree (the raw table's exit page was
    the first pageview's: a tracker's pageviews sent in one batch)."""
    storage = Storage(parse_url(f"chdb://{chdb_path}?database=t_{uuid.uuid4().hex[:10]}"), 2)
    try:
        migrate(storage)
        now = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=2)
        at = now - timedelta(hours=1)
        project = "e" * 24

        def session(name: str, values: list[str]) -> list:
            return [
                Sent(
                    "pageview",
                    at,
                    path=f"/{name}{i}",
                    session_id=name,
                    visitor_id=f"v-{name}",
                    source=v,
                    channel=v,
                    utm_medium=v,
                    utm_campaign=v,
                )
                for i, v in enumerate(values)
            ]

        _insert(
            storage, project, session("a", ["m1", "m2", "m3"]) + session("b", ["m3", "m2", "m1"])
        )
        expected = {
            "source": ["m1", "m3"],
            "channel": ["m1", "m3"],
            "utmMedium": ["m1", "m3"],
            "utmCampaign": ["m1", "m3"],
            "entryPage": ["/a0", "/b0"],
            "exitPage": ["/a2", "/b2"],
        }
        for by, values in expected.items():
            # Two days: an hour before now is yesterday in the first hour of a UTC day.
            query = Query(project, 2, now, dimension=by, limit=10)
            row = {"visitors": 1, "pageviews": 3, "events": 3}
            want = [{"value": v, **row} for v in values]
            assert _rollup(storage, query) == want, by
            # The raw table's answers alike: grouped by session under no filter, and for a
            # filter (and the query API) kept events joined to their session's value.
            raw = raw_breakdown_sql(query).replace("{db}", storage.database)
            assert _rows(asyncio.run(storage.aquery(raw, breakdown_parameters(query)))) == want
            assert _raw(storage, query) == want, by
    finally:
        storage.close()


def test_a_session_passes_by_its_first_value_not_by_a_later_row(client):
    """A session's rows of sessions_quarter each carry the value of their own first event; a
    filter keeps the session by the first of them, never by a later row's. Here three sessions,
    each over two 15-minute buckets: Google first then Bing (kept), Bing first then Google (not
    kept), Google alone (kept): sessions, events and rows as counted by hand."""
    project_id, _ = new_project(client)
    now = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=2)
    start = now.replace(minute=0, second=0) - timedelta(hours=3)
    events = []
    for n, sources in enumerate((("Google", "Bing"), ("Bing", "Google"), ("Google", "Google"))):
        for i, source in enumerate(sources):
            at = start + timedelta(minutes=n + 20 * i, milliseconds=n)
            events.append(
                ref.Ev(
                    "pageview",
                    at,
                    path=f"/{n}/{i}",
                    session_id=f"s{n}",
                    visitor_id=f"v{n}",
                    source=source,
                    channel="Organic Search",
                )
            )
    store(client, project_id, sent(events))
    storage = client.app.state.storage
    for raw in ([["is", "source", ["Google"]]], [["contains", "source", ["GOO"]]]):
        query = Query(project_id, 7, now, filters=parse_filters(json.dumps(raw)))
        summary = got_dashboard(client, query)["summary"]
        assert (summary["uniqueSessions"], summary["totalEvents"], summary["bounceRate"]) == (
            2,
            4,
            0,
        ), raw
        by_source = Query(project_id, 7, now, filters=query.filters, dimension="source")
        assert _rollup(storage, by_source) == [
            {"value": "Google", "visitors": 2, "pageviews": 4, "events": 4}
        ], raw
        by_path = Query(project_id, 7, now, filters=query.filters, dimension="entryPage")
        want = [{"value": f"/{n}/0", "visitors": 1, "pageviews": 2, "events": 2} for n in (0, 2)]
        assert _rollup(storage, by_path) == want == _reference(events, by_path, raw), raw


def test_a_batch_sent_without_times_keeps_its_order_in_every_answer(client, user):
    """The tracker sends no times: a visit's pageviews and events sent in one batch share the
    receipt millisecond. Its entry page, exit page and source are still its first pageview's,
    last pageview's and first event's, in the dashboard's breakdowns, under a filter and in the
    query API alike (the query API's exit page was the first pageview's)."""
    project, key = new_project(client, user)
    batch = [
        {"name": "pageview", "path": "/land", "sessionId": "s1", "visitorId": "v1",
         "referrer": "https://www.google.com/search"},
        {"name": "signup", "path": "/land", "sessionId": "s1", "visitorId": "v1"},
        {"name": "pageview", "path": "/pricing", "sessionId": "s1", "visitorId": "v1"},
        {"name": "pageview", "path": "/docs", "sessionId": "s1", "visitorId": "v1"},
        {"name": "session_end", "path": "/docs", "sessionId": "s1", "visitorId": "v1"},
    ]  # fmt: skip
    response = client.post("/api/collect", json={"events": batch}, headers={"x-api-key": key})
    assert response.status_code == 202, response.text
    want = {"entryPage": "/land", "exitPage": "/docs", "source": "Google"}
    for by, value in want.items():
        for filters in ([], [["is_not", "country", ["ZZ"]]], [["contains", "path", ["/"]]]):
            params = {"projectId": project, "by": by, "days": 1, "filters": json.dumps(filters)}
            got = client.get("/api/breakdown", params=params, headers=auth(user)).json()
            assert [row["value"] for row in got["rows"]] == [value], (by, filters, got)
    for dimension, value in (
        ("visit:entry_page", "/land"),
        ("visit:exit_page", "/docs"),
        ("visit:source", "Google"),
    ):
        body = {
            "site_id": project,
            "metrics": ["visits"],
            "date_range": "day",
            "dimensions": [dimension],
        }
        got = client.post("/api/v2/query", json=body, headers=auth(user))
        assert got.status_code == 200, got.text
        assert got.json()["results"] == [{"dimensions": [value], "metrics": [1]}], dimension

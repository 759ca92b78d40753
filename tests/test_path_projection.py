"""The projections of ``events``: schema 013's ``by_path`` (the events sorted by page, read instead
of the table when a filter on the path names its pages with ``is``) and schema 014's
``by_audience`` (sorted by country and browser, read when a filter names countries or browsers),
and schema 015's ``by_referrer`` (sorted by referrer, read by the breakdown by referrer).
The filtered dashboard's and breakdowns' queries give the same rows read either way (the table's
answers are checked against the reference model in tests/test_filters_wired.py and
tests/test_onescan.py), and such a filter does read its projection. An upgrade builds each for the
parts stored before, once."""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

import reference_filters as ref
from conftest import migrate_before, new_project, within_one_month
from tally.domain.filters import parse_filters
from tally.query import Query, filtered, onescan
from tally.query.breakdown import breakdown_parameters, breakdown_sql
from tally.storage.client import Storage, parse_url
from tally.storage.migrate import load_migrations, migrate
from test_filters_wired import PATHS, SOURCES, UTM, sent
from test_local_time import store
from test_writer import event_row

PROJECTION = "by_path"
AUDIENCE = "by_audience"
REFERRER = "by_referrer"
PROJECTIONS = (PROJECTION, AUDIENCE, REFERRER)


def many(now: datetime, sessions: int, seed: int) -> list[ref.Ev]:
    """``sessions`` sessions of one to four events (and a session_end for half of them) over ten
    days, in the shape of test_filters_wired's traffic; every event at its own millisecond."""
    rng = random.Random(seed)
    span = 10 * 24 * 3600 * 1000
    moments = sorted(rng.sample(range(1000, span), 5 * sessions), reverse=True)
    events: list[ref.Ev] = []
    for n in range(sessions):
        session = f"s{n}" if rng.random() > 0.15 else ""
        visitor = f"v{rng.randrange(2000)}" if rng.random() > 0.1 else ""
        client = rng.choice([("Chrome", "Windows", "desktop"), ("Safari", "iOS", "mobile")])
        common = dict(
            session_id=session,
            visitor_id=visitor,
            browser=client[0],
            os=client[1],
            device_type=client[2],
            country=rng.choice(["DE", "US", "NP", ""]),
            is_bot=rng.random() < 0.08,
        )
        utm = dict(zip(UTM, SOURCES[rng.randrange(len(SOURCES))], strict=True))
        times = sorted(now - timedelta(milliseconds=moments.pop()) for _ in range(5))
        for i in range(rng.choice([1, 2, 3, 4])):
            name = "pageview" if i == 0 or rng.random() < 0.7 else rng.choice(["signup", "klick"])
            path = rng.choice(PATHS) if name == "pageview" or rng.random() < 0.3 else ""
            referrer = "https://réf.example/x" if rng.random() < 0.4 else ""
            events.append(ref.Ev(name, times[i], path=path, referrer=referrer, **common, **utm))
        if rng.random() < 0.5:
            stated = rng.choice([None, 1234.5, 60000.0])
            events.append(ref.Ev("session_end", times[4], duration_ms=stated, **common))
    return events


@pytest.fixture(scope="module")
def tenant(client):
    """Enough events of one project (about 30k) for the table's window to span several granules
    while one page's events fit in one of the projection's."""
    project_id, _ = new_project(client)
    # Ten days in one month: the breakdown by path reads the projection when the window's events
    # are one part; split over two monthly partitions, ClickHouse read the table.
    recent = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=2)
    now = within_one_month(timedelta(days=10), recent)
    events = many(now, 11_000, seed=13)
    store(client, project_id, sent(events))
    return project_id, now, events


def _run(storage: Storage, sql: str, params, projections: bool) -> list[tuple]:
    """The rows of ``sql`` with projections used or not, in a stable order (the facts' rows of
    the days and hours come in no particular order)."""
    sql = sql.replace("{db}", storage.database)
    sql += f"\nSETTINGS optimize_use_projections = {int(projections)}"
    return sorted(asyncio.run(storage.aquery(sql, params)), key=repr)


def _reads_projection(storage: Storage, sql: str, params, projection: str = PROJECTION) -> bool:
    sql = "EXPLAIN " + sql.replace("{db}", storage.database)
    plan = asyncio.run(storage.aquery(sql, params))
    return any(f"ReadFromMergeTree ({projection})" in row[0] for row in plan)


def _queries(project_id: str, now: datetime, page: str) -> list[Query]:
    def q(raw: list, **kw) -> Query:
        return Query(
            project_id, kw.pop("days", 10), now, filters=parse_filters(json.dumps(raw)), **kw
        )

    first = now.date() - timedelta(days=6)
    return [
        q([["is", "path", [page]]]),
        q([["is", "path", [page, "/no/such/page"]]], tz="Asia/Kathmandu"),
        q([["is", "path", [page]], ["is", "country", ["DE", "US"]]], exclude_bots=False),
        q([["is", "path", [page]], ["is", "source", ["Google", "news"]]], tz="America/New_York"),
        q([["is", "path", [page]]], first=first, last=now.date() - timedelta(days=1), days=6),
    ]


def _same_either_way(
    storage: Storage, queries: list[Query], projection: str, chosen: int | None = None
) -> None:
    """The facts of each of the first ``chosen`` queries (all by default) read ``projection``,
    and every query of each dashboard and four of its breakdowns give the same rows with
    projections used and not."""
    for n, query in enumerate(queries):
        sqls = dict(onescan.onescan_sql(query))
        for by in ("source", "country", "path", "entryPage"):
            sqls[f"by {by}"] = filtered.breakdown_sql(replace(query, dimension=by, limit=1000))
        params = filtered.parameters(query)
        if chosen is None or n < chosen:
            assert _reads_projection(storage, sqls["facts"], params, projection), query.filters
        kept = 0
        for name, sql in sqls.items():
            if name in ("live", "bots"):
                continue
            table = _run(storage, sql, params, projections=False)
            assert _run(storage, sql, params, projections=True) == table, (name, query)
            kept += bool(table and any(table[0]))
        assert kept >= 4, query


def test_a_path_filter_reads_the_projection_and_gets_the_same_numbers(client, tenant):
    project_id, now, events = tenant
    pages = sorted({e.path for e in events if e.path})
    page = pages[len(pages) // 2]
    _same_either_way(client.app.state.storage, _queries(project_id, now, page), PROJECTION)


def test_a_country_or_browser_filter_reads_its_projection_and_gets_the_same_numbers(client, tenant):
    project_id, now, _ = tenant

    def q(raw: list, **kw) -> Query:
        return Query(
            project_id, kw.pop("days", 10), now, filters=parse_filters(json.dumps(raw)), **kw
        )

    first = now.date() - timedelta(days=6)
    queries = [
        q([["is", "country", ["DE"]]]),
        q([["is", "country", ["NP", "no such place"]], ["is", "browser", ["Chrome"]]]),
        q([["is", "country", ["US"]], ["is", "os", ["iOS"]]], exclude_bots=False),
        q([["is", "country", ["DE"]], ["is", "source", ["Google", "news"]]], tz="Pacific/Chatham"),
        q([["is", "country", ["US"]]], first=first, last=now.date() - timedelta(days=1), days=6),
        # A browser alone is a key range inside each country's: here (4 countries, 30k events)
        # those ranges are about a granule each, so ClickHouse may read either; the 10M-event
        # tenant of scripts/speed_load.py reads the projection (scripts/projection_ab.py, the
        # fdash_browser case, is faster with it and gives the same answer).
        q([["is", "browser", ["Safari"]]], tz="Asia/Kathmandu"),
        q([["is", "browser", ["Chrome"]], ["contains", "path", ["a"]]], tz="America/New_York"),
    ]
    _same_either_way(client.app.state.storage, queries, AUDIENCE, chosen=5)


def test_the_breakdown_by_path_reads_the_projection_and_gets_the_same_rows(client, tenant):
    """Unfiltered, ``path != ''`` leaves out the events without a path (most non-pageview events),
    a key range of the projection: it reads fewer granules there than the window of the table."""
    project_id, now, _ = tenant
    storage = client.app.state.storage
    for tz in ("UTC", "Asia/Kathmandu"):
        query = Query(project_id, 10, now, tz=tz, dimension="path", limit=1000)
        sql, params = breakdown_sql(query), breakdown_parameters(query)
        assert _reads_projection(storage, sql, params)
        rows = _run(storage, sql, params, projections=True)
        assert len(rows) == len(PATHS) and rows == _run(storage, sql, params, projections=False)


def test_the_breakdown_by_referrer_reads_its_projection_and_gets_the_same_rows(client, tenant):
    """``referrer != ''`` leaves out the events without one (60% here, about 90% on a real site),
    a key range of ``by_referrer``; a filtered view needs columns it does not keep."""
    project_id, now, _ = tenant
    storage = client.app.state.storage
    for tz in ("UTC", "Pacific/Chatham"):
        query = Query(project_id, 10, now, tz=tz, dimension="referrer", limit=1000)
        sql, params = breakdown_sql(query), breakdown_parameters(query)
        assert _reads_projection(storage, sql, params, REFERRER)
        rows = _run(storage, sql, params, projections=True)
        assert len(rows) == 1 and rows == _run(storage, sql, params, projections=False)
        assert rows[0][0] == "https://réf.example/x" and rows[0][3] > 1000
    query = Query(project_id, 10, now, filters=parse_filters('[["is","referrer",["x"]]]'))
    sql = onescan.onescan_sql(query)["facts"]
    assert not _reads_projection(storage, sql, filtered.parameters(query), REFERRER)


def test_contains_and_other_filters_read_the_table(client, tenant):
    project_id, now, _ = tenant
    storage = client.app.state.storage
    for raw in (
        [["contains", "path", ["blog"]]],
        [["contains", "country", ["d"]]],
        [["is_not", "browser", ["Chrome"]]],
        [["is", "os", ["iOS"]]],
        [["is", "source", ["Google"]]],
    ):
        query = Query(project_id, 10, now, filters=parse_filters(json.dumps(raw)))
        sql, params = onescan.onescan_sql(query)["facts"], filtered.parameters(query)
        for projection in PROJECTIONS:
            assert not _reads_projection(storage, sql, params, projection), (raw, projection)
    query = Query(project_id, 10, now, filters=parse_filters('[["is","country",["DE"]]]'))
    sql = onescan.onescan_sql(query)["facts"]
    assert not _reads_projection(storage, sql, filtered.parameters(query), PROJECTION)


@pytest.mark.parametrize(
    ("version", "built"),
    [(13, PROJECTIONS), (14, (AUDIENCE, REFERRER)), (15, (REFERRER,))],
    ids=["from 012", "from 013", "from 014"],
)
def test_an_upgrade_builds_the_projections_for_stored_parts_once(chdb_path, version, built):
    """Parts written by the schema before ``version`` get each projection the upgrade adds from
    one background mutation per projection, started when the migration is applied and not at
    the starts after it; a part written after the upgrade has them from its INSERT."""
    storage = Storage(parse_url(f"chdb://{chdb_path}?database=p_{uuid.uuid4().hex[:10]}"), 1)
    db = storage.database

    def parts(projection: str, with_it: bool) -> int:
        rows = storage.query(
            f"SELECT count() FROM system.parts WHERE database = {{d:String}} AND table = 'events' "
            f"AND active AND {'' if with_it else 'NOT '}has(projections, {{p:String}})",
            {"d": db, "p": projection},
        )
        return int(rows[0][0])

    def mutations() -> list[tuple]:
        return storage.query(
            "SELECT mutation_id, is_done, command FROM system.mutations "
            "WHERE database = {d:String} AND table = 'events' ORDER BY mutation_id",
            {"d": db},
        )

    try:
        migrate_before(storage, version)
        from tally.storage.writer import events_inserter

        insert = events_inserter(storage)
        for n in range(3):  # three parts written by the schema before
            rows = [
                event_row("e" * 24, "pageview", f"/p{i % 5}", session=f"s{n}{i % 9}")
                for i in range(40)
            ]
            insert(rows, uuid.uuid4().hex)
        for projection in built:
            assert parts(projection, with_it=False) == 3
        before = {m for m, _, _ in mutations()}  # the schema before's own (013's, 014's)
        assert migrate(storage) == [m.name for m in load_migrations()[version - 1 :]]
        for _ in range(200):  # the background mutations that build them for those parts
            if mutations() and all(done for _, done, _ in mutations()):
                break
            asyncio.run(asyncio.sleep(0.05))
        for projection in built:
            assert parts(projection, with_it=False) == 0, projection
            assert parts(projection, with_it=True) >= 1, projection
        started = mutations()
        new = [command for mutation, _, command in started if mutation not in before]
        columns = ("duration_digits", "duration_exponent")  # schema 019's, once too
        assert len(new) == len(built) + len(columns)
        assert all(any(f"MATERIALIZE PROJECTION {p}" in c for c in new) for p in built)
        assert all(any(f"MATERIALIZE COLUMN {c}" in n for n in new) for c in columns)
        assert migrate(storage) == []
        assert mutations() == started  # not started again at the next start
        insert([event_row("e" * 24, "pageview", "/new")], uuid.uuid4().hex)
        for projection in PROJECTIONS:  # a new part is written with every projection
            assert parts(projection, with_it=False) == 0, projection
    finally:
        storage.close()

"""Schema 010's ``audience_quarter`` and the decider's choice of it (query/decider.py): a
breakdown by country, browser, os or deviceType read from the rollup equals the raw table's
answer and the reference model's (tests/reference_filters.py), for the same data, with and
without filters on those four dimensions, in zones off UTC midnight, over from/to ranges, with
bots counted or not. Also: the upgrade from schema 009 fills the rollup from the events stored
before (once), and a deleted project's rows leave it."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from conftest import migrate_before
from tally.domain.filters import DIMENSIONS
from tally.query import Query
from tally.query.breakdown import breakdown_parameters, breakdown_sql
from tally.query.decider import AUDIENCE_COLUMNS, AUDIENCE_ROLLUP, breakdown_table
from tally.storage.client import Storage, parse_url
from tally.storage.migrate import migrate
from tally.storage.purge import purge_project
from test_filters_wired import sent, traffic
from test_sessions_rollup import (
    _insert,
    _raw,
    _reference,
    _rows,
    each_operator,
    ranges_equal,
    rollup_equals_raw,
    served_as_reference,
    tenant_beside_another,
)

AUDIENCE = list(AUDIENCE_COLUMNS)
OTHERS = [name for name in DIMENSIONS if name not in AUDIENCE_COLUMNS]


def _rollup(storage: Storage, query: Query) -> list[dict]:
    assert breakdown_table(query) == AUDIENCE_ROLLUP
    sql = breakdown_sql(query).replace("{db}", storage.database)
    assert "audience_quarter" in sql and ".events" not in sql
    return _rows(asyncio.run(storage.aquery(sql, breakdown_parameters(query))))


def audience_filters(events) -> list[list]:
    """Each of the four dimensions with each operator, values from the data; and combinations."""
    out = each_operator(events, AUDIENCE)
    out.append([["is", "country", ["DE", "NP"]], ["is_not", "browser", ["Safari"]]])
    out.append([["contains", "os", ["i"]], ["is", "deviceType", ["desktop", "日本語"]]])
    return out


@pytest.fixture(scope="module")
def site(client):
    return tenant_beside_another(client, 41)


def test_the_rollup_and_the_raw_table_give_the_same_rows(client, site):
    filter_sets = audience_filters(site[2])
    assert rollup_equals_raw(client, site, AUDIENCE, filter_sets, _rollup) > 15  # not vacuous


def test_ranges_zones_and_bots_the_same_either_way(client, site):
    zones = ("UTC", "Asia/Kathmandu", "Australia/Lord_Howe", "Pacific/Chatham")
    ranges_equal(client, site, zones, lambda bots: AUDIENCE, _rollup)


def test_the_served_breakdown_follows_the_decider(client, site):
    """fetch_breakdown reads the table the decider names and answers as the reference."""
    cases = (
        ([["is", "country", ["DE"]]], "browser"),  # audience on audience: rollup
        ([], "deviceType"),
        ([["contains", "path", ["blog"]]], "country"),  # an event filter it lacks: raw
        ([["is_not", "channel", ["Direct"]]], "os"),  # a session filter: raw
    )
    served_as_reference(client, site, cases)


def test_upgrade_from_009_fills_the_rollup_once_and_purge_empties_it(chdb_path):
    storage = Storage(parse_url(f"chdb://{chdb_path}?database=z_{uuid.uuid4().hex[:10]}"), 4)
    db = storage.database
    try:
        migrate_before(storage, 10)
        now = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=2)
        project, other = "a" * 24, "b" * 24
        events = traffic(now, seed=43)
        before = sent(events)
        _insert(storage, project, before[: len(before) // 2])  # written by schema 009
        _insert(storage, other, sent(traffic(now, seed=44)))
        assert "010_audience_quarter" in migrate(storage)
        _insert(storage, project, before[len(before) // 2 :])  # through the view
        assert migrate(storage) == []  # applied again: the backfill does not run twice
        for by in AUDIENCE:
            for tz in ("UTC", "Asia/Kathmandu"):
                query = Query(project, 7, now, tz=tz, dimension=by, limit=1000)
                got = _rollup(storage, query)
                assert got == _raw(storage, query) == _reference(events, query, []), (by, tz)
                assert got
        count = f"SELECT count() FROM {db}.audience_quarter WHERE project_id = {{p:String}}"
        assert storage.query(count, {"p": project})[0][0] > 0
        assert "audience_quarter" in purge_project(storage, project)
        assert storage.query(count, {"p": project}) == [(0,)]
        assert storage.query(count, {"p": other})[0][0] > 0  # the neighbour keeps its rows
    finally:
        storage.close()

"""query/onescan.py: the filtered dashboard's counts of the kept events in one read of the raw
window (and its sessions query) give the rows the per-part queries of ``filtered.dashboard_sql``
give, for the same data: event filters on each event dimension, session filters, both, every
operator, zones off UTC midnight, from/to ranges, bots counted or not, session values from
sessions_quarter or grouped from the raw events, and under filters on country, browser, os and
device type only the part audience_quarter answers (query/audience.py). The served numbers of
this path are checked against the reference model in tests/test_filters_wired.py (the runner,
storage/dashboard.py, uses it)."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest

from tally.domain.filters import DIMENSIONS, parse_filters
from tally.domain.metrics import RECENT_LIMIT
from tally.query import Query, filtered, onescan
from tally.storage import dashboard
from test_sessions_rollup import (
    exact_sessions,
    site,  # noqa: F401  (the module's data, one tenant beside another)
)

EVENT_DIMS = [name for name, d in DIMENSIONS.items() if not d.is_session]


def _run(storage, sql: str, params) -> list[tuple]:
    return asyncio.run(storage.aquery(sql.replace("{db}", storage.database), params))


def _filter_sets(events) -> list[list]:
    out: list[list] = []
    for name in EVENT_DIMS:
        column = DIMENSIONS[name].column
        present = sorted({str(getattr(e, column)) for e in events if getattr(e, column)})
        value = present[len(present) // 2] if present else "none"
        out.append([["is", name, [value, "' OR ''='"]]])
        out.append([["contains_not", name, [value[1:3].upper() or value]]])
    out += [
        [["is", "source", ["Google", "日本語"]]],
        [["contains_not", "entryPage", ["BLOG"]], ["contains", "path", ["/"]]],
        [["is_not", "exitPage", ["/"]], ["is", "channel", ["Direct", "Email"]]],
        [["is", "path", ["/no/such/page"]]],  # nothing kept: empty lists, zero visitors
        [["is", "country", ["DE", "NP"]], ["is_not", "browser", ["Safari"]]],
        [["is", "country", ["ZZ"]]],  # nothing kept, from audience_quarter
    ]
    return out


def _queries(project_id, now, raw: list) -> list[Query]:
    filters = parse_filters(json.dumps(raw))
    today = now.date()
    return [
        # Ten days: the whole traffic, with its session_end events without a session id.
        Query(project_id, 10, now, filters=filters),
        Query(project_id, 7, now, tz="Asia/Kathmandu", filters=filters, exclude_bots=False),
        Query(
            project_id,
            3,
            now,
            tz="America/St_Johns",
            filters=filters,
            first=today - timedelta(days=4),
            last=today - timedelta(days=2),
        ),
    ]


def _sort(rows) -> list[tuple]:
    return sorted(rows, key=repr)


@pytest.mark.parametrize("rollup", [True, False])
def test_one_scan_gives_the_per_part_rows(client, site, rollup):  # noqa: F811
    project_id, now, events = site
    storage = client.app.state.storage
    compared = kept_something = audience = 0
    for raw in _filter_sets(events):
        for query in _queries(project_id, now, raw):
            params = filtered.parameters(query)
            old = filtered.dashboard_sql(query, rollup)
            new = onescan.onescan_sql(query, rollup)
            if not rollup:
                assert all("sessions_quarter" not in sql for sql in new.values())
            facts = _run(storage, new["facts"], params)
            if "facts_audience" in new:  # filters on country, browser, os, device type only
                assert "audience_quarter" in new["facts_audience"]
                facts += _run(storage, new["facts_audience"], params)
                audience += 1
            parts = onescan.split(facts)
            for name, rows in parts.items():
                want = _run(storage, old[name], params)
                if name in ("days", "hours"):
                    rows, want = _sort(rows), _sort(want)  # unordered in both
                assert rows == want, (raw, query.tz, name)
                compared += 1
            assert exact_sessions(_run(storage, new["sessions"], params)) == exact_sessions(
                _run(storage, old["sessions"], params)
            ), (raw, query.tz)
            kept_something += int(parts["visitors"][0][0] > 0)
    assert compared > 100 and kept_something > 10  # the data exercised the filters
    assert audience >= 15  # and audience_quarter's share of them


def test_latest_events_under_session_filters_are_the_latest_kept(client, site):  # noqa: F811
    """The latest events under session filters, looked for among the latest events first
    (filtered.latest_kept_sql), are the ``recent`` rows of every kept event; when the
    candidates hold fewer than RECENT_LIMIT kept events the runner reads them in full."""
    project_id, now, events = site
    storage = client.app.state.storage
    narrowed = fell_back = 0
    session_sets = [
        raw for raw in _filter_sets(events) if any(DIMENSIONS[f[1]].is_session for f in raw)
    ]
    session_sets.append([["is_not", "source", ["Google"]], ["contains", "path", ["/"]]])
    assert len(session_sets) >= 3
    for raw in session_sets:
        for query in _queries(project_id, now, raw):
            params = filtered.parameters(query)
            full = _run(storage, filtered.dashboard_sql(query)["recent"], params)
            recent = filtered.dashboard_sql(query)["recent"].replace("{db}", storage.database)
            for candidates in (1, 25, 120, len(events), filtered.RECENT_CANDIDATES):
                fast = _run(storage, filtered.latest_kept_sql(query, candidates), params)
                if len(fast) == RECENT_LIMIT:
                    assert fast == full, (raw, query.tz, candidates)
                    narrowed += 1
                else:
                    assert len(fast) < RECENT_LIMIT
                    fell_back += 1
                served = asyncio.run(
                    dashboard.latest_events(storage, query, params, recent, candidates)
                )
                assert served == full, (raw, query.tz, candidates)
    assert narrowed > 5 and fell_back > 5  # both ways were taken
    # Without session filters the recent query is already narrow: nothing to look up.
    assert filtered.latest_kept_sql(_queries(project_id, now, [["is", "path", ["/"]]])[0]) is None

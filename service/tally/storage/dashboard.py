"""The dashboard's runner: executes the query layer's SQL (``tally.query.sql``) for a
:class:`~tally.query.Query` and assembles the rows. Rollups answer everything they can answer
exactly (the table decider says which); the raw table is read for the window's partial first UTC
day in zones other than UTC, the latest events and live visitors. The queries are independent and
run concurrently, each on its own pooled client."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Any

from ..domain.metrics import LIST_LIMIT, RECENT_LIMIT, stated_total
from ..query import Query, decide, filtered, onescan
from ..query.durations import SCALE
from ..query.sql import PER_DAY, PER_HOUR, PER_NAME, dashboard_sql, parameters
from .client import Storage, together

Rows = list[tuple[Any, ...]]


@dataclass
class DashboardRows:
    """The dashboard's facts, one list of rows per part of the response. ``sessions`` is one row:
    (sessions, sessions with a pageview, bounced sessions, session_end events, their total
    duration in milliseconds, exact: a Fraction). ``timeline`` rows are (local day, events,
    pageviews); ``day_visitors`` maps a local day to its distinct visitors; ``bots`` is the bot
    events left out of the window."""

    timeline: Rows
    names: Rows
    hours: Rows
    paths: Rows
    referrers: Rows
    browsers: Rows
    devices: Rows
    visitors: Rows
    sessions: Rows
    recent: Rows
    live: Rows
    day_visitors: dict[date, int] = field(default_factory=dict)
    bots: int = 0


def rendered(query: Query, database: str) -> dict[str, str]:
    """The dashboard's SQL for ``query`` with the database filled in."""
    return {name: sql.replace("{db}", database) for name, sql in dashboard_sql(query).items()}


async def fetch(storage: Storage, query: Query) -> DashboardRows:
    """Run every dashboard query of ``query`` concurrently and assemble their rows."""
    if query.raw:
        return await fetch_raw(storage, query)
    plan = decide(query)
    params = parameters(query, plan)
    queries = {
        name: sql.replace("{db}", storage.database)
        for name, sql in dashboard_sql(query, plan).items()
    }
    results = await together(*(storage.report(sql, params) for sql in queries.values()))
    return assemble(dict(zip(queries, results, strict=True)))


# What a comparison shows of the other range: its summary and timeline. The rest (top lists,
# latest events, live visitors) is not read for it.
SUMMARY_PARTS = frozenset(
    {
        "quarters",
        "visitors",
        "sessions",
        "session_ends",
        "session_ends_edge",
        "bots",
        "facts",
        "facts_audience",
    }
)


async def fetch_summary(storage: Storage, query: Query) -> DashboardRows:
    """The rows of ``query``'s summary and timeline only (the other range of ``compare``); the
    other parts are empty. The same queries as :func:`fetch`, fewer of them."""
    if query.raw:
        params = filtered.parameters(query)
        sqls = onescan.onescan_sql(query)
        if "facts_audience" in sqls:  # it holds the timeline and visitors; facts the top lists
            sqls.pop("facts")
    else:
        plan = decide(query)
        params = parameters(query, plan)
        sqls = dashboard_sql(query, plan)
    queries = {
        name: sql.replace("{db}", storage.database)
        for name, sql in sqls.items()
        if name in SUMMARY_PARTS
    }
    results = await together(*(storage.report(sql, params) for sql in queries.values()))
    found: dict[str, Rows] = dict(zip(queries, results, strict=True))
    if query.raw:
        facts = found.pop("facts", []) + found.pop("facts_audience", [])
        return _raw_rows({**onescan.split(facts), **found, "recent": [], "live": []})
    empty = ("clients", "paths", "referrers", "recent", "live", "names", "hours")
    found.update({name: [] for name in empty})
    found.update({name: [] for name in ("browsers", "devices")})
    return assemble(found)


def assemble(results: dict[str, Rows]) -> DashboardRows:
    """Split the shared scans and finish the session maths, in exact integers."""
    quarters = results["quarters"]
    daily = [(d, c, pv) for g, d, _, _, c, pv in quarters if g == PER_DAY]
    names = [(name, c) for g, _, name, _, c, _ in quarters if g == PER_NAME][:LIST_LIMIT]
    hours = [(h, c) for g, _, _, h, c, _ in quarters if g == PER_HOUR]
    clients = results["clients"]
    sessions, with_pageviews, bounced, unstated_first = results["sessions"][0]
    ends, unstated_at, scaled, outside = results["session_ends"][0]
    stated = [(-SCALE, int(scaled)), *outside]  # (exponent, significands): query/durations.py
    if "session_ends_edge" in results:
        edge_ends, edge_unstated_at, edge_scaled, edge_outside = results["session_ends_edge"][0]
        ends, unstated_at = int(ends) + int(edge_ends), int(unstated_at) + int(edge_unstated_at)
        stated += [(-SCALE, int(edge_scaled)), *edge_outside]
    duration = stated_total(stated) + (int(unstated_at) - int(unstated_first))
    visitors = results["visitors"]
    bots = results.get("bots")
    return DashboardRows(
        timeline=daily,
        names=names,
        hours=hours,
        paths=results["paths"],
        referrers=results["referrers"],
        browsers=[(key, count) for g, key, count in clients if g == 0],
        devices=[(key, count) for g, key, count in clients if g == 1],
        visitors=[(count,) for g, _, count in visitors if g == 1],
        sessions=[(sessions, with_pageviews, bounced, ends, duration)],
        recent=results["recent"],
        live=results["live"],
        day_visitors={d: int(count) for g, d, count in visitors if g == 0},
        bots=int(bots[0][0] or 0) if bots else 0,
    )


async def fetch_raw(storage: Storage, query: Query) -> DashboardRows:
    """The raw path (filters): ``tally.query.onescan``'s queries, which answer every count of
    the kept events in one read of the raw window where ``filtered.dashboard_sql``'s read it
    once per part; the same rows."""
    params = filtered.parameters(query)
    queries = {
        name: sql.replace("{db}", storage.database)
        for name, sql in onescan.onescan_sql(query).items()
    }
    recent = queries.pop("recent")
    results = await together(
        latest_events(storage, query, params, recent),
        *(storage.report(sql, params) for sql in queries.values()),
    )
    found = dict(zip(("recent", *queries), results, strict=True))
    facts = found.pop("facts") + found.pop("facts_audience", [])
    return _raw_rows({**onescan.split(facts), **found})


async def latest_events(
    storage: Storage,
    query: Query,
    params: dict[str, Any],
    recent: str,
    candidates: int = filtered.RECENT_CANDIDATES,
) -> Rows:
    """The filtered dashboard's latest events: under session filters first among the
    ``candidates`` latest events (``filtered.latest_kept_sql``, a sixth of the time of a full
    read on a 10M-event tenant), and by ``recent`` (SQL, the kept events in full) when those
    hold fewer than RECENT_LIMIT kept events."""
    latest = filtered.latest_kept_sql(query, candidates)
    if latest is not None:
        rows = await storage.report(latest.replace("{db}", storage.database), params)
        if len(rows) >= RECENT_LIMIT:
            return rows
    return await storage.report(recent, params)


def _raw_rows(r: dict[str, Rows]) -> DashboardRows:
    sessions, with_pageviews, bounced, ends, stated, unstated = r["sessions"][0]
    duration = stated_total(stated) + int(unstated or 0)
    bots = r.get("bots")
    return DashboardRows(
        timeline=[(d, c, pv) for d, c, pv, _ in r["days"]],
        names=r["names"],
        hours=r["hours"],
        paths=r["paths"],
        referrers=r["referrers"],
        browsers=r["browsers"],
        devices=r["devices"],
        visitors=r["visitors"],
        sessions=[(sessions, with_pageviews, bounced, ends, duration)],
        recent=r["recent"],
        live=r["live"],
        day_visitors={d: int(v) for d, _, _, v in r["days"]},
        bots=int(bots[0][0] or 0) if bots else 0,
    )

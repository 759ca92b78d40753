"""The dashboard's queries. Rollups answer everything they can answer exactly; the raw table is read
only for the latest events and live visitors, both narrow reads on its (project_id, occurred_at)
order. The queries are independent and run concurrently, each on its own pooled client."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..domain.metrics import LIST_LIMIT, LIVE_WINDOW, MAX_DAYS, RECENT_LIMIT, Window
from .client import Storage

Rows = list[tuple[Any, ...]]

# Each query reads one rollup (or the raw table) for one project. Parameters: p (project id),
# d0/d1 (first and last day of the window), t0 (window start), live (start of the live window).
# The two exact distinct counts over the window (sessions, visitors) cost the most, so they are
# listed first and start first. The dashboard is CPU-bound on a small machine: queries that read
# the same rollup share one scan (GROUPING SETS) rather than paying a query's fixed cost twice.
DAY_RANGE = "project_id = {p:String} AND day BETWEEN {d0:Date} AND {d1:Date}"
QUERIES: dict[str, str] = {
    # Per session in the window: pageviews, first event, session_end events without a stated
    # duration. Only what needs the per-session grouping is grouped: every extra aggregate state
    # on 1.5M sessions (10M events, 90 days) costs about as much as the grouping itself. A
    # session_end's duration is its metadata.durationMs when stated, else the time since the first
    # event of its session in the window, so the grouped part is the sum over sessions of
    # (unstated ends) x (first event); hash 0 (no session id) is no session and measures nothing.
    "sessions": f"""
        SELECT countIf(session_hash != 0), countIf(session_hash != 0 AND pv >= 1),
               countIf(session_hash != 0 AND pv = 1),
               sumIf(toInt128(unstated) * first_ms, session_hash != 0)
        FROM (SELECT session_hash, sum(pageviews) AS pv,
                     toUnixTimestamp64Milli(min(first_at)) AS first_ms,
                     sum(ends - ends_stated) AS unstated
              FROM {{db}}.sessions_daily WHERE {DAY_RANGE} GROUP BY session_hash)""",
    # The rest of the duration maths is additive over rows, so it needs no grouping, and these
    # exact sums are those of sessions_daily's per-day projection (schema 004), which ClickHouse
    # reads instead of the sessions. Int128: a sum of epoch milliseconds passes Int64 at about
    # five million session_end events.
    "session_ends": f"""
        SELECT sum(ends), sum(stated_ms), sumIf(toInt128(unstated_at_ms), session_hash != 0)
        FROM {{db}}.sessions_daily WHERE {DAY_RANGE}""",
    "visitors": f"""
        SELECT uniqExact(visitor_hash) FROM {{db}}.visitors_daily WHERE {DAY_RANGE}""",
    # Timeline (g = 0: per day, every day of the window) and event names (g = 1: the top
    # MAX_DAYS, cut to LIST_LIMIT in Python) in one scan of events_daily.
    "daily": f"""
        SELECT grouping(day) AS g, day, name, sum(events) AS c, sumIf(events, name = 'pageview')
        FROM {{db}}.events_daily WHERE {DAY_RANGE}
        GROUP BY GROUPING SETS ((day), (name))
        ORDER BY g, c DESC, name ASC LIMIT {MAX_DAYS} BY g""",
    # Browsers (g = 0) and device types (g = 1), top LIST_LIMIT each, in one scan.
    "clients": f"""
        SELECT grouping(browser) AS g, if(g = 0, toString(browser), toString(device_type)) AS key,
               sum(events) AS c
        FROM {{db}}.clients_daily WHERE {DAY_RANGE}
        GROUP BY GROUPING SETS ((browser), (device_type))
        ORDER BY g, c DESC, key ASC LIMIT {LIST_LIMIT} BY g""",
    "hours": """
        SELECT toHour(hour) AS h, sum(events) FROM {db}.events_hourly
        WHERE project_id = {p:String} AND hour >= {t0:DateTime('UTC')} GROUP BY h""",
    "paths": f"""
        SELECT path, sum(views) AS c FROM {{db}}.paths_daily WHERE {DAY_RANGE}
        GROUP BY path ORDER BY c DESC, path ASC LIMIT {LIST_LIMIT}""",
    "referrers": f"""
        SELECT referrer, sum(views) AS c FROM {{db}}.referrers_daily WHERE {DAY_RANGE}
        GROUP BY referrer ORDER BY c DESC, referrer ASC LIMIT {LIST_LIMIT}""",
    "recent": f"""
        SELECT toString(event_id), name, path, visitor_id, occurred_at FROM {{db}}.events
        WHERE project_id = {{p:String}} AND occurred_at >= {{t0:DateTime64(3, 'UTC')}}
        ORDER BY occurred_at DESC LIMIT {RECENT_LIMIT}""",
    "live": """
        SELECT uniqExact(visitor_id) FROM {db}.events
        WHERE project_id = {p:String} AND occurred_at >= {live:DateTime64(3, 'UTC')}
          AND visitor_id != ''""",
}


@dataclass
class DashboardRows:
    """The dashboard's facts, one list of rows per part of the response. ``sessions`` is one row:
    (sessions, sessions with a pageview, bounced sessions, session_end events, their total
    duration in milliseconds)."""

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


def parameters(project_id: str, window: Window) -> dict[str, Any]:
    return {
        "p": project_id,
        "d0": window.first_day,
        "d1": window.today,
        "t0": window.start,
        "live": window.now - LIVE_WINDOW,
    }


async def fetch(storage: Storage, project_id: str, window: Window) -> DashboardRows:
    """Run every dashboard query concurrently and return their rows by name."""
    params = parameters(project_id, window)
    queries = _rendered(storage.database)
    results = await asyncio.gather(*(storage.aquery(sql, params) for sql in queries.values()))
    return assemble(dict(zip(queries, results, strict=True)))


def assemble(results: dict[str, Rows]) -> DashboardRows:
    """Split the shared scans and finish the session maths, in exact integers."""
    daily = [row for row in results["daily"] if row[0] == 0]
    names = [row for row in results["daily"] if row[0] == 1][:LIST_LIMIT]
    clients = results["clients"]
    sessions, with_pageviews, bounced, unstated_first = results["sessions"][0]
    ends, stated, unstated_at = results["session_ends"][0]
    duration = float(stated) + float(int(unstated_at) - int(unstated_first))
    return DashboardRows(
        timeline=[(day, events, pageviews) for _, day, _, events, pageviews in daily],
        names=[(name, count) for _, _, name, count, _ in names],
        hours=results["hours"],
        paths=results["paths"],
        referrers=results["referrers"],
        browsers=[(key, count) for g, key, count in clients if g == 0],
        devices=[(key, count) for g, key, count in clients if g == 1],
        visitors=results["visitors"],
        sessions=[(sessions, with_pageviews, bounced, ends, duration)],
        recent=results["recent"],
        live=results["live"],
    )


@lru_cache(maxsize=64)
def _rendered(database: str) -> dict[str, str]:
    return {name: sql.replace("{db}", database) for name, sql in QUERIES.items()}

"""The dashboard's queries. Rollups answer everything they can answer exactly; the raw table is read
only for the latest events and live visitors, both narrow reads on its (project_id, occurred_at)
order. The queries are independent and run concurrently, each on its own pooled client."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..domain.metrics import LIST_LIMIT, LIVE_WINDOW, RECENT_LIMIT, Window
from .client import Storage

Rows = list[tuple[Any, ...]]

# Each query reads one rollup (or the raw table) for one project. Parameters: p (project id),
# d0/d1 (first and last day of the window), t0 (window start), live (start of the live window).
DAY_RANGE = "project_id = {p:String} AND day BETWEEN {d0:Date} AND {d1:Date}"
QUERIES: dict[str, str] = {
    "timeline": f"""
        SELECT day, sum(events), sumIf(events, name = 'pageview')
        FROM {{db}}.events_daily WHERE {DAY_RANGE} GROUP BY day""",
    "names": f"""
        SELECT name, sum(events) AS c FROM {{db}}.events_daily WHERE {DAY_RANGE}
        GROUP BY name ORDER BY c DESC, name ASC LIMIT {LIST_LIMIT}""",
    "hours": """
        SELECT toHour(hour) AS h, sum(events) FROM {db}.events_hourly
        WHERE project_id = {p:String} AND hour >= {t0:DateTime('UTC')} GROUP BY h""",
    "paths": f"""
        SELECT path, sum(views) AS c FROM {{db}}.paths_daily WHERE {DAY_RANGE}
        GROUP BY path ORDER BY c DESC, path ASC LIMIT {LIST_LIMIT}""",
    "referrers": f"""
        SELECT referrer, sum(views) AS c FROM {{db}}.referrers_daily WHERE {DAY_RANGE}
        GROUP BY referrer ORDER BY c DESC, referrer ASC LIMIT {LIST_LIMIT}""",
    "browsers": f"""
        SELECT browser, sum(events) AS c FROM {{db}}.clients_daily WHERE {DAY_RANGE}
        GROUP BY browser ORDER BY c DESC, browser ASC LIMIT {LIST_LIMIT}""",
    "devices": f"""
        SELECT device_type, sum(events) AS c FROM {{db}}.clients_daily WHERE {DAY_RANGE}
        GROUP BY device_type ORDER BY c DESC, device_type ASC LIMIT {LIST_LIMIT}""",
    "visitors": f"""
        SELECT uniqExact(visitor_hash) FROM {{db}}.visitors_daily WHERE {DAY_RANGE}""",
    # Per session in the window: pageviews, first event, session_end facts; then the summary.
    # A session_end's duration is its metadata.durationMs when stated, else the time since the
    # first event of its session in the window; without a session id (hash 0) it is 0.
    "sessions": f"""
        SELECT countIf(session_hash != 0), countIf(session_hash != 0 AND pv >= 1),
               countIf(session_hash != 0 AND pv = 1), sum(ends),
               sum(stated) + sumIf(unstated_at - toInt64(ends - ends_stated) * first_ms,
                                   session_hash != 0)
        FROM (SELECT session_hash, sum(pageviews) AS pv,
                     toUnixTimestamp64Milli(min(first_at)) AS first_ms, sum(ends) AS ends,
                     sum(ends_stated) AS ends_stated, sum(stated_ms) AS stated,
                     sum(unstated_at_ms) AS unstated_at
              FROM {{db}}.sessions_daily WHERE {DAY_RANGE} GROUP BY session_hash)""",
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
    return DashboardRows(**dict(zip(queries, results, strict=True)))


@lru_cache(maxsize=64)
def _rendered(database: str) -> dict[str, str]:
    return {name: sql.replace("{db}", database) for name, sql in QUERIES.items()}

"""Live visitors on their own: the distinct visitors of a project's last few minutes, read from
the raw table's newest rows only (the dashboard page polls it every 5 seconds, so it must stay
far cheaper than a whole dashboard)."""

from __future__ import annotations

from datetime import datetime

from ..query.sql import live_parameters, live_sql
from .client import Storage


async def live_visitors(
    storage: Storage, project_id: str, now: datetime, *, exclude_bots: bool
) -> int:
    """The dashboard's liveVisitors (tally.query.sql.live_sql) for the window up to ``now``."""
    sql = live_sql(exclude_bots).replace("{db}", storage.database)
    rows = await storage.aquery(sql, {"p": project_id, **live_parameters(now)})
    return int(rows[0][0]) if rows else 0

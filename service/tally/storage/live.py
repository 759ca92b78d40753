"""Live visitors on their own: the distinct visitors of a project's last few minutes, read from
the raw table's newest rows only (the dashboard page polls it every 5 seconds, so it must stay
far cheaper than a whole dashboard)."""

from __future__ import annotations

from datetime import datetime

from ..domain.metrics import LIVE_WINDOW
from .client import Storage

# The same count as the dashboard's liveVisitors (tally.query.sql): the primary key's
# (project_id, occurred_at) prefix limits the read to the project's last LIVE_WINDOW of events.
LIVE_SQL = """
    SELECT uniqExact(visitor_id) FROM {db}.events
    WHERE project_id = {p:String} AND occurred_at >= {since:DateTime64(3, 'UTC')}
      AND occurred_at <= {now:DateTime64(3, 'UTC')} AND visitor_id != ''{bots}"""


async def live_visitors(
    storage: Storage, project_id: str, now: datetime, *, exclude_bots: bool
) -> int:
    """Distinct non-empty visitor ids with an event in the ``LIVE_WINDOW`` before ``now``."""
    sql = LIVE_SQL.replace("{db}", storage.database).replace(
        "{bots}", " AND is_bot = 0" if exclude_bots else ""
    )
    # Bounded by ``now`` too: after the clock was set back, events stored before carry later
    # times, and they counted as live for as long as the clock was set back by.
    rows = await storage.aquery(sql, {"p": project_id, "since": now - LIVE_WINDOW, "now": now})
    return int(rows[0][0]) if rows else 0

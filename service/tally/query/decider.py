"""The table decider: for a :class:`Query`, which tables answer which part of it exactly.

- Per-15-minute rollups (``events_quarter``, ``visitors_quarter``) answer everything whose keys
  are few or that needs local days or hours: timeline, heatmap, totals, event names, bot events,
  distinct visitors per local day and in the window. A window starts at a local midnight, which
  is always on a 15-minute UTC boundary, so ``bucket >= start`` is exact.
- Per-UTC-day rollups answer, for the window's whole UTC days, what has many keys (paths,
  referrers, clients) or needs a session's rows (sessions, bounce, duration). When the window
  starts inside a UTC day (any zone but UTC-like ones), the raw ``events`` of that first partial
  UTC day, ``[start, next UTC midnight)``, are read beside them: at most a day of one project's
  events, a narrow read on the raw table's ``(project_id, occurred_at)`` order.
- The latest events and live visitors are read from the raw table, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from .model import QUARTER, Query


@dataclass(frozen=True)
class Plan:
    """Where each part of a query is read. ``edge`` is the raw-table interval [start, end) that
    the day rollups do not cover, or None when the window starts at a UTC midnight."""

    start: datetime
    first_utc_day: date
    last_utc_day: date
    edge: tuple[datetime, datetime] | None

    @property
    def uses_raw_edge(self) -> bool:
        return self.edge is not None


def decide(query: Query) -> Plan:
    start = query.start
    if (start - datetime(1970, 1, 1, tzinfo=UTC)) % QUARTER:
        # Only historical local mean times are off the 15-minute grid; no window of today's
        # zones starts there. Said loudly rather than answered inexactly.
        raise ValueError(f"zone {query.tz} starts days off the 15-minute grid")
    last = query.now.astimezone(UTC).date()
    day = start.date()
    if start == datetime.combine(day, time(0), tzinfo=UTC):
        return Plan(start, day, last, None)
    next_midnight = datetime.combine(day + timedelta(days=1), time(0), tzinfo=UTC)
    return Plan(start, day + timedelta(days=1), last, (start, next_midnight))

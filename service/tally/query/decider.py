"""The table decider: for a :class:`Query`, which tables answer which part of it exactly.

- Per-15-minute rollups (``events_quarter``, ``visitors_quarter``, ``sessions_quarter``) answer
  everything whose keys are few or that needs local days or hours: timeline, heatmap, totals,
  event names, bot events, distinct visitors per local day and in the window, and every session
  dimension (source, channel, utm_*, entry and exit page). A window starts and ends at local
  midnights, which are always on a 15-minute UTC boundary, so ``start <= bucket < end`` is exact.
- Per-UTC-day rollups answer, for the window's whole UTC days, what has many keys (paths,
  referrers, clients) or needs a session's rows (sessions, bounce, duration). When the window
  starts inside a UTC day (any zone but UTC-like ones), or a closed range (``from``/``to``) ends
  inside one, the raw ``events`` of those partial UTC days are read beside them: at most a day of
  one project's events at each end, a narrow read on the raw table's ``(project_id, occurred_at)``
  order.
- Filters: :func:`breakdown_table` says, per breakdown, whether ``sessions_quarter`` answers it
  (a session dimension under session filters only), ``audience_quarter`` (schema 010: country,
  browser, os or deviceType, under filters on those four only), ``event_visitors`` (schema 020:
  the event names, without filters, over four weeks or more), or the raw table is read
  (query/filtered.py).
  A filtered dashboard reads the raw table; session filters find their sessions in
  ``sessions_quarter`` rather than grouping the window's raw events by session, and under event
  filters only the session metrics read the kept sessions' rows of ``session_days`` (the
  whole UTC days of the plan below, and the raw edges).
- The latest events and live visitors are read from the raw table, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Final, Literal

from ..domain.filters import DIMENSIONS
from .model import QUARTER, Query, local_midnight

SESSIONS_ROLLUP: Final = "sessions_quarter"
AUDIENCE_ROLLUP: Final = "audience_quarter"
EVENT_ROLLUP: Final = "event_visitors"
# From this many days on, the breakdown by event reads event_visitors; shorter windows read the
# raw table, which then holds fewer rows than the rollup's quarters. On the 10M-event tenant
# (`scripts/speed_time.py DIR 7 ev_`, medians of 7 in process, 2026-12-02): rollup / raw 90 / 50
# ms at 7 days, 96 / 70 at 14, 122 / 169 at 30, 221 / 415 at 90.
EVENT_ROLLUP_DAYS: Final = 28
RAW: Final = "raw"
# The dimensions audience_quarter keeps per visitor and 15 minutes (API name: its column).
AUDIENCE_COLUMNS: Final = {
    "country": "country",
    "browser": "browser",
    "os": "os",
    "deviceType": "device_type",
}


@dataclass(frozen=True)
class Plan:
    """Where each part of a query is read. The day rollups cover the UTC days
    ``first_utc_day``..``last_utc_day``; ``edge`` and ``end_edge`` are the raw-table intervals
    [a, b) they do not cover (a partial first and last UTC day), or None."""

    start: datetime
    end: datetime
    first_utc_day: date
    last_utc_day: date
    edge: tuple[datetime, datetime] | None
    end_edge: tuple[datetime, datetime] | None = None
    # Every local day of the window is a UTC day (the zone's offset is 0 at each of its
    # midnights: UTC itself, or London in winter): what is kept per UTC day answers per local day.
    utc_days: bool = False

    @property
    def day_after_last(self) -> date:
        """The day rollups' exclusive end (``first_utc_day`` when no UTC day is whole)."""
        return max(self.last_utc_day + timedelta(days=1), self.first_utc_day)

    @property
    def uses_raw_edge(self) -> bool:
        return self.edge is not None or self.end_edge is not None

    def edges(self) -> tuple[datetime, datetime, datetime, datetime]:
        """(e0, e1, e2, e3): the two raw intervals; an absent one is empty."""
        first = self.edge or self.end_edge
        assert first is not None
        second = self.end_edge if self.edge is not None and self.end_edge else (first[1], first[1])
        return (*first, *second)


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(0), tzinfo=UTC)


def decide(query: Query) -> Plan:
    start, end = query.start, query.end
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    if (start - epoch) % QUARTER or (end - epoch) % QUARTER:
        # Only historical local mean times are off the 15-minute grid; no window of today's
        # zones starts there. Said loudly rather than answered inexactly.
        raise ValueError(f"zone {query.tz} starts days off the 15-minute grid")
    now = query.now.astimezone(UTC)
    edge = end_edge = None
    first = start.date()
    if start != _midnight(first):
        first += timedelta(days=1)
        edge = (start, min(_midnight(first), end))
    if end > now:
        # The window is open (it ends after now): nothing is stored after now, so the day
        # rollups read up to today's UTC day, whole, as they always did.
        last = now.date()
    else:
        last = end.date() - timedelta(days=1)
        if end != _midnight(end.date()):
            a = max(_midnight(end.date()), edge[1] if edge else start)
            if a < end:
                end_edge = (a, end)
    days = [*query.day_list(), query.last_day + timedelta(days=1)]
    utc_days = query.tz == "UTC" or all(
        local_midnight(day, query.zone) == _midnight(day) for day in days
    )
    return Plan(start, end, first, last, edge, end_edge, utc_days)


def breakdown_table(
    query: Query,
) -> Literal["sessions_quarter", "audience_quarter", "event_visitors", "raw"]:
    """Which table answers ``query``'s breakdown exactly. ``sessions_quarter`` holds each
    session's values and counts, not its events' paths or countries: it answers a session
    dimension when every filter is a session filter (or there are none). ``audience_quarter``
    holds each visitor's events per country, browser, os and device type: it answers a breakdown
    by one of those when every filter is on one of those (each an event filter, a ``WHERE`` on
    its rows). ``event_visitors`` holds each visitor's 15-minute buckets per event name, not
    their other values: it answers the breakdown by event without filters over
    :data:`EVENT_ROLLUP_DAYS` days or more (query/names.py). Anything else reads the raw
    table."""
    dim = DIMENSIONS.get(query.dimension or "")
    if dim is not None and dim.is_session and all(f.dimension.is_session for f in query.filters):
        return SESSIONS_ROLLUP
    if query.dimension in AUDIENCE_COLUMNS and all(
        f.dimension.name in AUDIENCE_COLUMNS for f in query.filters
    ):
        return AUDIENCE_ROLLUP
    if query.dimension == "event" and not query.filters and query.days >= EVENT_ROLLUP_DAYS:
        return EVENT_ROLLUP
    return RAW

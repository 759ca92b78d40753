"""The query value: what a request asks, resolved in the project's time zone."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo

from ..domain import zones
from ..domain.filters import Filters
from ..domain.metrics import LIST_LIMIT

QUARTER = timedelta(minutes=15)  # every UTC offset in use is a multiple of it


def resolve_zone(name: str) -> tzinfo:
    """The IANA zone ``name`` as the storage engine reads it (domain/zones.py); ValueError when
    there is none by that name."""
    return zones.zone(name)


def local_midnight(day: date, zone: tzinfo) -> datetime:
    """The first instant (UTC) of the local calendar day ``day``. Where a DST change skips
    midnight (clocks jump from 00:00 to 01:00), that is the instant the day begins at 01:00."""
    return datetime.combine(day, time(0), tzinfo=zone).astimezone(UTC)


@dataclass(frozen=True)
class Query:
    """One question about one project: the ``days`` local calendar days of zone ``tz`` ending
    today (from local midnight of today - days + 1 until ``now``), bots left out when
    ``exclude_bots``. ``dimension`` and ``limit`` are a breakdown's. Made once at the edge;
    every later step reads it and none changes it."""

    project_id: str
    days: int
    now: datetime
    tz: str = "UTC"
    exclude_bots: bool = True
    dimension: str | None = None
    limit: int = LIST_LIMIT
    # Issue 17: filters (domain/filters.py) and an explicit range of local dates (from/to; then
    # ``days`` is its length). Filters send the dashboard to the raw table (query/filtered.py).
    filters: Filters = ()
    first: date | None = None
    last: date | None = None

    def __post_init__(self) -> None:
        resolve_zone(self.tz)  # an unknown zone fails here, at the edge
        if self.now.tzinfo is None:
            raise ValueError("now must be timezone-aware")

    @property
    def zone(self) -> tzinfo:
        return resolve_zone(self.tz)

    @property
    def today(self) -> date:
        """Today in the project's zone."""
        return self.now.astimezone(self.zone).date()

    @property
    def first_day(self) -> date:
        if self.first is not None:
            return self.first
        return self.today - timedelta(days=self.days - 1)

    @property
    def last_day(self) -> date:
        return self.last if self.last is not None else self.today

    @property
    def end(self) -> datetime:
        """The window's end (exclusive), UTC: local midnight after its last day."""
        return local_midnight(self.last_day + timedelta(days=1), self.zone)

    @property
    def raw(self) -> bool:
        """Filters: the dashboard is answered from the raw ``events`` table, exactly
        (query/filtered.py). A range without filters is answered like ``days``, from the rollups
        (query/decider.py)."""
        return bool(self.filters)

    @property
    def start(self) -> datetime:
        """The window's first instant, UTC: local midnight of its first day."""
        return local_midnight(self.first_day, self.zone)

    def day_list(self) -> list[date]:
        """The window's local days, oldest first."""
        first = self.first_day
        return [first + timedelta(days=i) for i in range((self.last_day - first).days + 1)]

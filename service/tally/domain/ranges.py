"""Date ranges of the dashboard and the v2 query API, in the project's time zone, and the range
they are compared with.

- ``days=N`` (1-90, default 14): the N local calendar days ending today (the seed's meaning).
- ``from`` and ``to`` (``YYYY-MM-DD``, local dates, inclusive): any range of at most 366 days.
  ``days`` together with ``from``/``to``, only one of ``from``/``to``, or ``from`` after ``to``:
  ``InvalidQuery``.
- A range covers local midnight of its first day up to (not including) local midnight after its
  last day, DST-correct through ``zoneinfo`` (New York's spring-forward day is 23 hours long). A
  midnight that a DST change skips starts the day at the change.
- ``compare=previous_period``: the same number of days just before. ``compare=previous_year``:
  the same dates a year earlier; February 29 becomes February 28 (``Comparison.note`` says so).
- ``relative_change``: percent, 1 decimal, half up; ``None`` when the earlier value is 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from decimal import localcontext
from typing import Literal

from .metrics import LARGEST, MAX_DAYS, WIDE, exact, round_half_up
from .query_errors import InvalidQuery

DEFAULT_DAYS = 14
MAX_RANGE_DAYS = 366
# Events are never before 1970 (CONTRACT.md); the upper bound keeps date arithmetic in range.
MIN_DATE = date(1970, 1, 1)
MAX_DATE = date(9998, 12, 31)
CHANGE_PLACES = 1  # decimals of a relative change in percent

Compare = Literal["previous_period", "previous_year"]
COMPARES: tuple[Compare, ...] = ("previous_period", "previous_year")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
QUARTER_HOUR = timedelta(minutes=15)


def _offset(offset: timedelta | None) -> str:
    """-0:44:30, +5:45."""
    seconds = int((offset or timedelta()).total_seconds())
    sign, seconds = ("-" if seconds < 0 else "+"), abs(seconds)
    text = f"{sign}{seconds // 3600}:{seconds % 3600 // 60:02d}"
    return text + (f":{seconds % 60:02d}" if seconds % 60 else "")


def local_midnight(day: date, zone: tzinfo) -> datetime:
    """The UTC instant the local ``day`` begins in ``zone``.

    ``fold=0`` makes a skipped midnight (clocks jump from 00:00) resolve to the instant of the
    jump, the first instant of that local day, and a repeated one to its first occurrence.
    """
    return datetime.combine(day, time(0), tzinfo=zone).astimezone(UTC)


@dataclass(frozen=True)
class DateRange:
    """Local days ``first_day``..``last_day`` (inclusive) and the UTC instants
    ``start_utc`` <= t < ``end_utc`` they cover."""

    first_day: date
    last_day: date
    start_utc: datetime
    end_utc: datetime

    @classmethod
    def of(
        cls, first_day: date, last_day: date, zone: tzinfo, compare: Compare | None = None
    ) -> DateRange:
        """The range of those local days; ``InvalidQuery`` when one of its ends falls off the
        15-minute grid that every rollup keeps: only a zone's historical local mean time does
        (Africa/Monrovia until 1972, -0:44:30; Pacific/Kiritimati until 1979, -10:40).
        ``compare``: this is the range ``compare`` chose, so the refusal names ``compare`` and
        says so (the user sent neither of its dates)."""
        start = local_midnight(first_day, zone)
        end = local_midnight(last_day + timedelta(days=1), zone)
        ends = ((first_day, start, "$.from", "starts"), (last_day, end, "$.to", "ends"))
        for day, instant, path, verb in ends:
            if (instant - EPOCH) % QUARTER_HOUR:
                # the zone's offset just before that midnight: the local mean time's, also on
                # the day it ended (Monrovia's 1972-01-07 began at the change, off the grid)
                offset = (instant - timedelta(seconds=1)).astimezone(zone).utcoffset()
                off_grid = (
                    f"in {zone.key} is {_offset(offset)} from UTC, a local mean time off the "
                    "15-minute grid Tally's rollups keep"
                )
                if compare is None:
                    raise InvalidQuery(path, f"{day} {off_grid}; choose later dates")
                raise InvalidQuery(
                    "$.compare",
                    f"the comparison range ({compare}) {verb} {day}, which {off_grid}; choose "
                    "later dates, or leave out compare",
                )
        return cls(first_day, last_day, start, end)

    @property
    def days(self) -> int:
        return (self.last_day - self.first_day).days + 1

    def day_list(self) -> list[date]:
        return [self.first_day + timedelta(days=i) for i in range(self.days)]

    def until(self, now: datetime) -> datetime:
        """End of the range as read at ``now``: no later than now (a range ending today)."""
        return min(self.end_utc, now)


@dataclass(frozen=True)
class RangeSpec:
    """A validated range request, not yet placed in a zone: ``days``, or ``first``..``last``."""

    days: int | None = None
    first: date | None = None
    last: date | None = None

    def resolve(self, zone: tzinfo, now: datetime) -> DateRange:
        if self.first is not None and self.last is not None:
            return DateRange.of(self.first, self.last, zone)
        today = now.astimezone(zone).date()
        days = self.days or DEFAULT_DAYS
        return DateRange.of(today - timedelta(days=days - 1), today, zone)


def parse_date(value: str, path: str) -> date:
    """A local date, strictly ``YYYY-MM-DD``."""
    if not isinstance(value, str) or not _DATE.fullmatch(value):
        raise InvalidQuery(path, "must be a date as YYYY-MM-DD")
    try:
        day = date.fromisoformat(value)
    except ValueError:
        raise InvalidQuery(path, "must be a date as YYYY-MM-DD") from None
    if not MIN_DATE <= day <= MAX_DATE:
        raise InvalidQuery(path, f"must be between {MIN_DATE} and {MAX_DATE}")
    return day


def date_span(first: date, last: date, *, first_path: str, last_path: str) -> RangeSpec:
    """Validates an explicit range: first <= last, at most ``MAX_RANGE_DAYS`` days inclusive."""
    if first > last:
        raise InvalidQuery(first_path, f"must not be after {last_path.rsplit('.', 1)[-1]}")
    span = (last - first).days + 1
    if span > MAX_RANGE_DAYS:
        raise InvalidQuery(
            last_path, f"the range must cover at most {MAX_RANGE_DAYS} days (this one has {span})"
        )
    return RangeSpec(first=first, last=last)


def parse_range(days: int | None, from_: str | None, to: str | None) -> RangeSpec:
    """``days`` or ``from`` + ``to`` of a query string (all optional; nothing means 14 days)."""
    if days is not None and (from_ is not None or to is not None):
        raise InvalidQuery("$.days", "cannot be combined with from and to; give one or the other")
    if from_ is None and to is None:
        if days is None:
            return RangeSpec(days=DEFAULT_DAYS)
        if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_DAYS:
            raise InvalidQuery("$.days", f"must be an integer from 1 to {MAX_DAYS}")
        return RangeSpec(days=days)
    if from_ is None:
        raise InvalidQuery("$.from", "is required with to")
    if to is None:
        raise InvalidQuery("$.to", "is required with from")
    first = parse_date(from_, "$.from")
    last = parse_date(to, "$.to")
    return date_span(first, last, first_path="$.from", last_path="$.to")


def resolve_range(
    days: int | None, from_: str | None, to: str | None, *, zone: tzinfo, now: datetime
) -> DateRange:
    return parse_range(days, from_, to).resolve(zone, now)


def parse_compare(value: str | None) -> Compare | None:
    if value is None or value == "":
        return None
    if value not in COMPARES:
        raise InvalidQuery("$.compare", "must be one of " + ", ".join(COMPARES))
    return value  # type: ignore[return-value]


@dataclass(frozen=True)
class Comparison:
    """The range compared with, and a note when a date had to be moved (Feb 29)."""

    range: DateRange
    note: str | None = None


def _year_earlier(day: date) -> tuple[date, bool]:
    try:
        return day.replace(year=day.year - 1), False
    except ValueError:  # February 29
        return day.replace(year=day.year - 1, day=28), True


def comparison_range(current: DateRange, compare: Compare, zone: tzinfo) -> Comparison:
    """``previous_period``: the ``current.days`` days just before ``current.first_day``.
    ``previous_year``: the same local dates one year earlier (Feb 29 -> Feb 28).
    ``InvalidQuery`` naming ``$.compare`` when that range is off the rollups' grid."""
    if compare == "previous_period":
        last = current.first_day - timedelta(days=1)
        first = current.first_day - timedelta(days=current.days)
        return Comparison(DateRange.of(first, last, zone, compare))
    first, moved_first = _year_earlier(current.first_day)
    last, moved_last = _year_earlier(current.last_day)
    note = None
    if moved_first or moved_last:
        moved = [
            d for d, m in ((current.first_day, moved_first), (current.last_day, moved_last)) if m
        ]
        note = (
            " and ".join(d.isoformat() for d in moved)
            + " has no date a year earlier; February 28 stands for February 29"
        )
    return Comparison(DateRange.of(first, last, zone, compare), note)


def relative_change(current: float | int, previous: float | int) -> float | None:
    """(current - previous) / previous in percent, 1 decimal half up; None when previous is 0.

    E.g. 150 after 100 -> 50.0; 0 after 100 -> -100.0; 1 after 3 -> -66.7; 5 after 0 -> None.
    """
    if previous == 0:
        return None
    with localcontext(WIDE):
        now, before = exact(current), exact(previous)
        change = (now - before) * 100 / before
        # A change past the largest double (stated durations of about 1e308 ms) stays a number.
        return float(round_half_up(max(-LARGEST, min(change, LARGEST)), CHANGE_PLACES))

"""Metric definitions of CONTRACT.md that are not SQL: the window and the rounding rules."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import ROUND_HALF_UP, Decimal

MAX_DAYS = 90  # the longest dashboard window
LIST_LIMIT = 10  # rows in each top list
RECENT_LIMIT = 20  # rows in recentEvents
LIVE_WINDOW = timedelta(minutes=5)  # liveVisitors: visitors with an event this recently


@dataclass(frozen=True)
class Window:
    """The N UTC calendar days ending today: from 00:00 UTC of (today - N + 1) until now."""

    days: int
    now: datetime

    @property
    def today(self) -> date:
        return self.now.astimezone(UTC).date()

    @property
    def first_day(self) -> date:
        return self.today - timedelta(days=self.days - 1)

    @property
    def start(self) -> datetime:
        return datetime.combine(self.first_day, time(0), tzinfo=UTC)

    def day_list(self) -> list[date]:
        return [self.first_day + timedelta(days=i) for i in range(self.days)]


def round_half_up(value: float | Decimal, places: int = 0) -> Decimal:
    quantum = Decimal(1).scaleb(-places)
    return Decimal(str(value)).quantize(quantum, rounding=ROUND_HALF_UP)


def bounce_rate(bounced: int, sessions_with_pageviews: int) -> float:
    """Percentage of sessions with a pageview that had exactly one; 2 decimals, half up."""
    if sessions_with_pageviews <= 0:
        return 0.0
    return float(round_half_up(Decimal(100 * bounced) / Decimal(sessions_with_pageviews), 2))


def mean_ms(total: float, count: int) -> int:
    """Mean duration in whole milliseconds, half up; 0 when there is nothing to average."""
    if count <= 0:
        return 0
    return int(round_half_up(Decimal(str(total)) / Decimal(count), 0))

"""Metric definitions of CONTRACT.md that are not SQL: the window and the rounding rules."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import ROUND_HALF_UP, Context, Decimal, localcontext
from fractions import Fraction

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


# Room for every digit of any double (the largest has 309 before the point) and the places
# after it: decimal's default 28 digits fail on a session_end's durationMs of 1e29, which any
# visitor can send.
WIDE = Context(prec=400, rounding=ROUND_HALF_UP)
LARGEST = Decimal(sys.float_info.max)  # the largest double, exactly


def exact(value: float | int | Decimal) -> Decimal:
    """``value`` as a Decimal (a double by its shortest repr, as the contract's examples read).
    A sum of doubles past the largest double (infinity: stated durations of about 1e308 ms) counts
    as the largest double."""
    number = value if isinstance(value, Decimal) else Decimal(str(value))
    return LARGEST.copy_sign(number) if number.is_infinite() else number


def round_half_up(value: float | Decimal, places: int = 0) -> Decimal:
    quantum = Decimal(1).scaleb(-places)
    with localcontext(WIDE):
        return exact(value).quantize(quantum)


def bounce_rate(bounced: int, sessions_with_pageviews: int) -> float:
    """Percentage of sessions with a pageview that had exactly one; 2 decimals, half up."""
    if sessions_with_pageviews <= 0:
        return 0.0
    return float(round_half_up(Decimal(100 * bounced) / Decimal(sessions_with_pageviews), 2))


def stated_total(pairs: Iterable[tuple[int, int]] | None) -> Fraction:
    """The exact sum of stated durations from SQL's (exponent, sum of significands) pairs
    (query/durations.py, schema 019): each sum times ten to its exponent. None: 0."""
    total = Fraction(0)
    for exponent, digits in pairs or ():
        total += int(digits) * Fraction(10) ** int(exponent)
    return total


def mean_ms(total: Fraction | int, count: int) -> int:
    """Mean duration in whole milliseconds, half up, of durations summing to ``total`` (exact);
    0 when there is nothing to average. A total past the largest double (stated durations of
    about 1e308 ms) counts as the largest double (README)."""
    if count <= 0:
        return 0
    mean = min(Fraction(total), Fraction(LARGEST)) / count
    whole = math.floor(abs(mean) + Fraction(1, 2))  # half up: away from zero
    return whole if mean >= 0 else -whole

"""Issue 17 at the edge: the query parameters ``filters``, ``from``/``to`` and ``compare`` of
``GET /api/dashboard`` and ``GET /api/breakdown`` made into a :class:`~tally.query.Query` (the
domain parsers raise ``InvalidQuery``: 400 naming the part), and the additive ``comparison``
fields. No SQL here."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Annotated, Any

from litestar import Request
from litestar.datastructures import State
from litestar.params import QueryParameter
from msgspec import Struct, field

from ..domain.filters import Filter, parse_filters
from ..domain.ids import utcnow
from ..domain.metrics import MAX_DAYS
from ..domain.query_errors import InvalidQuery
from ..domain.ranges import (
    DEFAULT_DAYS,
    Compare,
    DateRange,
    comparison_range,
    parse_compare,
    parse_range,
    relative_change,
)
from ..query import Query
from ..query.breakdown import MAX_LIMIT
from . import schemas as s
from .access import asking_user, project_settings

OptionalDaysParam = Annotated[
    int | None,
    QueryParameter(
        ge=1,
        le=MAX_DAYS,
        # The default is said, not declared: a client generated from the document sent a
        # declared default with every request, and from/to next to days is refused.
        description=f"lookback window in calendar days of the project's time zone, 1 to "
        f"{MAX_DAYS} (default {DEFAULT_DAYS}, when from/to are not given); not with from/to",
    ),
]
DATE_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
FromParam = Annotated[
    str | None,
    QueryParameter(
        name="from",
        pattern=DATE_PATTERN,
        description="first local date of the range (YYYY-MM-DD, the project's zone), with to; "
        "at most 366 days, inclusive",
    ),
]
ToParam = Annotated[
    str | None,
    QueryParameter(
        pattern=DATE_PATTERN, description="last local date of the range (YYYY-MM-DD), with from"
    ),
]
FiltersParam = Annotated[
    str | None,
    QueryParameter(
        description='JSON array of [operator, dimension, [values...]], e.g. [["is","country",'
        '["DE"]]]; operators is, is_not, contains, contains_not; at most 20 (README "Filters")'
    ),
]
CompareParam = Annotated[
    Compare | None,
    QueryParameter(
        name="compare",
        description="previous_period or previous_year: adds comparison with the other range",
    ),
]


# The integer parameters, written in digits only: the parameter parser would also read 1e1 or
# 2.0 as numbers, which the README calls not an integer.
WHOLE_NUMBERS = {
    "days": f"must be a whole number of days from 1 to {MAX_DAYS}",
    "limit": f"must be a whole number of rows from 1 to {MAX_LIMIT}",
}
_DIGITS = re.compile(r"[0-9]+")


def _digits_only(request: Request[Any, Any, Any], names: tuple[str, ...]) -> None:
    """``names``: the integer parameters the route takes (a dashboard ignores ``limit``, as it
    ignores every parameter it does not take)."""
    for name in names:
        rule = WHOLE_NUMBERS[name]
        raw = request.query_params.get(name)
        if raw is not None and not _DIGITS.fullmatch(raw):
            raise InvalidQuery(f"$.{name}", rule)


async def asked_query(
    request: Request[Any, Any, Any],
    state: State,
    project_id: str,
    *,
    days: int | None,
    from_: str | None,
    to: str | None,
    filters: str | None,
    compare: str | None,
    **extra: Any,
) -> tuple[Query, Compare | None]:
    """The question ``GET /api/dashboard`` and ``GET /api/breakdown`` ask of the signed-in user's
    project: its window (days or from/to, in the project's zone), its filters and the range to
    compare with, if any. In this order: 429 over the user's limit, 400 for ``compare``, 404
    unless the user owns the project, 400 naming the part of the range or filters. ``extra`` goes
    to :class:`~tally.query.Query` as is (breakdown's dimension and limit)."""
    user = asking_user(request)
    against = parse_compare(compare)
    tz, exclude_bots = await project_settings(state, user, project_id)
    _digits_only(request, tuple(name for name in WHOLE_NUMBERS if name == "days" or name in extra))
    spec = parse_range(days, from_, to)
    parsed = parse_filters(filters)
    if spec.first is not None and spec.last is not None:
        length = (spec.last - spec.first).days + 1
    else:
        length = spec.days or DEFAULT_DAYS
    query = Query(
        project_id,
        length,
        utcnow(),
        tz=tz,
        exclude_bots=exclude_bots,
        filters=parsed,
        first=spec.first,
        last=spec.last,
        **extra,
    )
    # 400 for days a zone's local mean time puts off the rollups' 15-minute grid (ranges.py),
    # the range's own or the one compared with: before anything is read, so that the answer
    # does not depend on what is stored (a breakdown with no rows never asked the other range).
    current = DateRange.of(query.first_day, query.last_day, query.zone)
    if against is not None:
        comparison_range(current, against, query.zone)
    return query, against


def earlier_query(query: Query, compare: Compare, *filters: Filter) -> Query:
    """The same question over the range ``compare`` says (raw path: an explicit range)."""
    current = DateRange.of(query.first_day, query.last_day, query.zone)
    other = comparison_range(current, compare, query.zone).range
    return replace(
        query,
        days=other.days,
        first=other.first_day,
        last=other.last_day,
        filters=query.filters + filters,
    )


# --- the additive response fields (absent unless compare is given) -----------------------------
class SummaryChange(Struct, rename="camel"):
    """Each summary field's relative change in percent (1 decimal); null when before was 0."""

    total_events: float | None
    pageviews: float | None
    unique_visitors: float | None
    unique_sessions: float | None
    avg_session_duration_ms: float | None
    bounce_rate: float | None
    bot_events: float | None


class DashboardComparison(Struct):
    """The other range (local dates, inclusive), its summary and timeline, and the change."""

    from_: str = field(name="from")
    to: str
    summary: s.Summary
    timeline: list[s.DayPoint]
    change: SummaryChange


class RowChange(Struct):
    visitors: float | None
    pageviews: float | None
    events: float | None


class RowComparison(Struct):
    """A breakdown row's metrics in the other range (0 when absent there) and their change."""

    visitors: int
    pageviews: int
    events: int
    change: RowChange


class ComparedDashboard(s.Dashboard, omit_defaults=True):
    comparison: DashboardComparison | None = None


FIELDS = (
    "total_events",
    "pageviews",
    "unique_visitors",
    "unique_sessions",
    "avg_session_duration_ms",
    "bounce_rate",
    "bot_events",
)


def compared_dashboard(
    current: s.Dashboard, earlier: s.Dashboard | None, query: Query | None
) -> ComparedDashboard:
    out = ComparedDashboard(
        **{name: getattr(current, name) for name in s.Dashboard.__struct_fields__}
    )
    if earlier is None or query is None:
        return out
    change = SummaryChange(
        **{
            f: relative_change(getattr(current.summary, f), getattr(earlier.summary, f))
            for f in FIELDS
        }
    )
    out.comparison = DashboardComparison(
        from_=query.first_day.isoformat(),
        to=query.last_day.isoformat(),
        summary=earlier.summary,
        timeline=earlier.timeline,
        change=change,
    )
    return out

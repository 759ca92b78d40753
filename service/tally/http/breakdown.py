"""``GET /api/breakdown``: a dimension's rows over the dashboard's window. No SQL here."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request
from litestar.datastructures import State
from litestar.params import QueryParameter
from msgspec import Struct

from ..domain.filters import DIMENSIONS, Filter
from ..domain.ranges import relative_change
from ..query.breakdown import DEFAULT_LIMIT, MAX_LIMIT, By
from ..storage.breakdown import fetch_breakdown
from .access import ProjectIdParam, get_head, project_route
from .compare import (
    CompareParam,
    FiltersParam,
    FromParam,
    OptionalDaysParam,
    RowChange,
    RowComparison,
    ToParam,
    asked_query,
    earlier_query,
)
from .gone import while_connected

ByParam = Annotated[By, QueryParameter(description="the dimension to break the window down by")]
LimitParam = Annotated[int, QueryParameter(ge=1, le=MAX_LIMIT, description="rows, 1 to 1000")]


class BreakdownRow(Struct, omit_defaults=True):
    value: str
    visitors: int
    pageviews: int
    events: int
    comparison: RowComparison | None = None  # only with compare


class Breakdown(Struct):
    by: str
    rows: list[BreakdownRow]


@get_head(
    "/api/breakdown",
    **project_route("dashboard"),
    summary="A project's window broken down by one dimension",
    description="Rows by visitors, then pageviews, descending, then value ascending. Session "
    "dimensions (source, channel, utm*, entryPage, exitPage) count every event of a session "
    "under its session's first (or, for exitPage, last) value in the window. Takes the "
    "dashboard's days or from/to, filters and compare (each row then gains comparison: its "
    "metrics in the other range and their change).",
)
async def breakdown(
    request: Request[Any, Any, Any],
    state: State,
    project_id: ProjectIdParam,
    by: ByParam,
    days: OptionalDaysParam = None,
    limit: LimitParam = DEFAULT_LIMIT,
    from_: FromParam = None,
    to: ToParam = None,
    filters: FiltersParam = None,
    compare_: CompareParam = None,
) -> Breakdown:
    query, against = await asked_query(
        request,
        state,
        project_id,
        days=days,
        from_=from_,
        to=to,
        filters=filters,
        compare=compare_,
        dimension=by,
        limit=limit,
    )

    async def both() -> tuple[list[BreakdownRow], dict[str, tuple[int, int, int]]]:
        rows = [
            BreakdownRow(str(v), int(u), int(p), int(e))
            for v, u, p, e in await fetch_breakdown(state.storage, query)
        ]
        if against is None or not rows:
            return rows, {}
        # The same rows in the other range: the query's filters and "by is one of these values"
        # (for a session dimension, the sessions with that value; exact either way).
        only = Filter("is", DIMENSIONS[by], tuple(r.value for r in rows))
        other = earlier_query(query, against, only)
        before = {
            str(v): (int(u), int(p), int(e))
            for v, u, p, e in await fetch_breakdown(state.storage, other)
        }
        return rows, before

    # One watch for the client over both queries: a second watch after the first was stopped
    # is told "disconnected" by granian, though the client is there (a spurious 499).
    rows, before = await while_connected(request, both())
    if against is not None:
        for row in rows:
            u, p, e = before.get(row.value, (0, 0, 0))
            row.comparison = RowComparison(
                u,
                p,
                e,
                RowChange(
                    relative_change(row.visitors, u),
                    relative_change(row.pageviews, p),
                    relative_change(row.events, e),
                ),
            )
    return Breakdown(by=by, rows=rows)

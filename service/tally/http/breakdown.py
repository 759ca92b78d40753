"""``GET /api/breakdown``: a dimension's rows over the dashboard's window. No SQL here."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request, get
from litestar.datastructures import State
from litestar.params import QueryParameter
from msgspec import Struct

from ..domain.ids import utcnow
from ..query import Query
from ..query.breakdown import MAX_LIMIT, By
from ..storage.breakdown import fetch_breakdown
from .auth import session_guard
from .controllers import (
    DaysParam,
    ProjectIdParam,
    _errors,
    _project_settings,
    _user,
)

ByParam = Annotated[By, QueryParameter(description="the dimension to break the window down by")]
LimitParam = Annotated[int, QueryParameter(ge=1, le=MAX_LIMIT, description="rows, 1 to 1000")]


class BreakdownRow(Struct):
    value: str
    visitors: int
    pageviews: int
    events: int


class Breakdown(Struct):
    by: str
    rows: list[BreakdownRow]


@get(
    "/api/breakdown",
    guards=[session_guard],
    responses=_errors(400, 401, 404, 429, 503),
    tags=["dashboard"],
    security=[{"session": []}],
    summary="A project's window broken down by one dimension",
    description="Rows by visitors, then pageviews, descending, then value ascending. Session "
    "dimensions (source, channel, utm*, entryPage, exitPage) count every event of a session "
    "under its session's first (or, for exitPage, last) value in the window.",
)
async def breakdown(
    request: Request[Any, Any, Any],
    state: State,
    project_id: ProjectIdParam,
    by: ByParam,
    days: DaysParam = 14,
    limit: LimitParam = 10,
) -> Breakdown:
    user = _user(request)
    tz, exclude_bots = await _project_settings(state, user, project_id)
    query = Query(
        project_id, days, utcnow(), tz=tz, exclude_bots=exclude_bots, dimension=by, limit=limit
    )
    rows = await fetch_breakdown(state.storage, query)
    return Breakdown(
        by=by,
        rows=[BreakdownRow(str(v), int(u), int(p), int(e)) for v, u, p, e in rows],
    )

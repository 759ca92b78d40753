"""``POST /api/v2/query``: Plausible's Stats API v2 shape over Tally's numbers
(domain/stats_v2.py parses; storage/v2.py reads). No SQL here."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, post
from litestar.datastructures import State
from litestar.status_codes import HTTP_200_OK

from ..domain.ids import utcnow
from ..domain.metrics import bounce_rate, mean_ms
from ..domain.query_errors import InvalidQuery
from ..domain.stats_v2 import V2Meta, V2Response, V2Row, echo, parse_query
from ..query import Query
from ..storage.client import ReportTooLarge
from ..storage.v2 import fetch_v2
from .access import asking_user, project_route, project_settings
from .decoding import check_body
from .errors import report_hints
from .gone import while_connected
from .limits import check_body_filters
from .messages import plain

# The six metrics of a range with no (kept) events.
NOTHING: dict[str, Any] = {
    "visitors": 0,
    "visits": 0,
    "pageviews": 0,
    "events": 0,
    "bounce_rate": bounce_rate(0, 0),
    "visit_duration": mean_ms(0, 0),
}

# Any JSON value: the body checks of http/decoding.py before the query's own decoding.
_JSON: msgspec.json.Decoder[object] = msgspec.json.Decoder()


@post(
    "/api/v2/query",
    status_code=HTTP_200_OK,
    **project_route("dashboard"),
    summary="Query a project's numbers in the shape of Plausible's Stats API v2",
    description="Body: site_id (projectId), metrics, date_range, dimensions, filters, order_by, "
    "pagination. A documented subset (README 'A query API for scripts'); anything else is 400 "
    "Invalid payload naming it.",
)
async def v2_query(request: Request[Any, Any, Any], state: State) -> V2Response:
    user = asking_user(request)
    body = await request.body()
    # The checks every JSON body gets (content type, byte order mark, UTF-8, duplicate keys,
    # nesting), then the query's own shape.
    headers = request.headers
    decoded = check_body(
        _JSON,
        body,
        headers.getall("content-type", []),
        None,
        headers.getall("content-encoding", []),
    )
    try:
        v2 = parse_query(body)
    except InvalidQuery as exc:  # msgspec's wording of a shape error, in plain words
        path, message = plain(exc.message, exc.path)
        raise InvalidQuery(path, message, exc.error) from None
    check_body_filters(decoded.get("filters", []))  # all of them at most 16 KiB, as in a URL
    tz, exclude_bots = await project_settings(state, user, v2.project_id)
    now = utcnow()
    query = Query(v2.project_id, 1, now, tz=tz, exclude_bots=exclude_bots)
    resolved = v2.resolve_range(query.zone, now)
    query = Query(
        v2.project_id,
        resolved.days,
        now,
        tz=tz,
        exclude_bots=exclude_bots,
        filters=v2.filters,
        first=resolved.first_day,
        last=resolved.last_day,
    )
    # The order and the page are taken in SQL: only the page's rows come back (storage/v2.py).
    try:
        page = await while_connected(
            request,
            fetch_v2(
                state.storage, query, v2.dimensions, v2.metrics, v2.order_by, v2.limit, v2.offset
            ),
        )
    except ReportTooLarge as exc:  # say what this query can ask for instead (http/errors.py)
        exc.hints = report_hints(v2.dimensions, v2.metrics, resolved.days, bool(v2.filters))  # type: ignore[attr-defined]
        raise
    if not v2.dimensions and not page and v2.offset == 0:
        page = [([], NOTHING)]  # an aggregate is one row, as Plausible's: zeros when empty
    return V2Response(
        results=[V2Row(dims, [values[m] for m in v2.metrics]) for dims, values in page],
        meta=V2Meta(timezone=tz),
        query=echo(v2, resolved, query.zone),
    )

"""The v2 query API's runner: executes ``tally.query.v2``'s SQL and joins its two results into
{dimension values: the six metrics}."""

from __future__ import annotations

from typing import Any

from ..domain.metrics import bounce_rate, mean_ms
from ..query import Query, filtered
from ..query.v2 import v2_sql
from .client import Storage, together


async def fetch_v2(
    storage: Storage, query: Query, dimensions: tuple[str, ...]
) -> dict[tuple[str, ...], dict[str, Any]]:
    sqls = {k: v.replace("{db}", storage.database) for k, v in v2_sql(query, dimensions).items()}
    params = filtered.parameters(query)
    events, sessions = await together(
        *(storage.report(sqls[k], params) for k in ("events", "sessions"))
    )
    n = len(dimensions)
    per_session = {tuple(str(v) for v in r[:n]): r[n + 1 :] for r in sessions}
    out: dict[tuple[str, ...], dict[str, Any]] = {}
    for row in events:
        key = tuple(str(v) for v in row[:n])
        visitors, pageviews, count = (int(v) for v in row[n + 1 :])
        visits, with_pv, bounced, ends, total = per_session.get(key, (0, 0, 0, 0, 0.0))
        out[key] = {
            "visitors": visitors,
            "visits": int(visits),
            "pageviews": pageviews,
            "events": count,
            "bounce_rate": bounce_rate(int(bounced), int(with_pv)),
            "visit_duration": mean_ms(float(total or 0), int(ends)),
        }
    return out

"""The breakdown's runner: executes the query layer's SQL (``tally.query.breakdown``), from the
table the decider names (``sessions_quarter``, ``audience_quarter`` or the raw table,
query/decider.py)."""

from __future__ import annotations

from typing import Any

from ..query import Query, filtered
from ..query.breakdown import breakdown_parameters, breakdown_sql
from ..query.decider import RAW, breakdown_table
from .client import Storage


async def fetch_breakdown(storage: Storage, query: Query) -> list[tuple[Any, ...]]:
    """(value, visitors, pageviews, events) rows of ``query.dimension``, best first."""
    if query.filters and breakdown_table(query) == RAW:
        sql = filtered.breakdown_sql(query).replace("{db}", storage.database)
        return await storage.report(sql, filtered.parameters(query))
    sql = breakdown_sql(query).replace("{db}", storage.database)
    return await storage.report(sql, breakdown_parameters(query))

"""The v2 query API's runner: executes ``tally.query.v2``'s SQL and makes one page of results,
each row (its dimension values, {metric: value}).

The order and the page are taken in SQL (query/v2.py), so only the page's rows (at most 10000)
come back, and what Python does per row (the rounding of ``bounce_rate`` and ``visit_duration``
with Decimal) runs in a thread, off the event loop: a query of 270k groups held the worker's loop
for seconds before, health checks and collects waiting behind it. When SQL cannot order exactly
(a ``visit_duration`` order where a stated duration is out of the scale query/v2.py orders by)
every group is read and ordered in Python, in a thread too."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from ..domain.metrics import bounce_rate, mean_ms, stated_total
from ..query import Query, filtered
from ..query.durations import SCALE
from ..query.v2 import NUMBERS, SESSION_NUMBERS, groups_sql, page_sql
from .client import Storage

Row = tuple[list[str], dict[str, Any]]
OUTSIDE_N = NUMBERS.index("outside_n")


def _values(row: Sequence[Any], n: int, metrics: Sequence[str]) -> dict[str, Any]:
    """The metrics asked for of one group row (d0.., then ``NUMBERS``)."""
    numbers = dict(zip(NUMBERS, row[n : n + len(NUMBERS)], strict=True))
    out: dict[str, Any] = {}
    for name in metrics:
        if name == "bounce_rate":
            out[name] = bounce_rate(int(numbers["bounced"]), int(numbers["with_pv"]))
        elif name == "visit_duration":
            if len(numbers["outside"]) != int(numbers["outside_n"] or 0):  # fetch_v2 asks
                raise RuntimeError("visit_duration needs the pairs of its durations out of scale")
            stated = [(-SCALE, int(numbers["stated"] or 0)), *numbers["outside"]]
            total = stated_total(stated) + int(numbers["unstated"] or 0)
            out[name] = mean_ms(total, int(numbers["ends"]))
        else:
            out[name] = int(numbers[name])
    return out


def _rows(groups: Sequence[Sequence[Any]], n: int, metrics: Sequence[str]) -> list[Row]:
    return [([str(v) for v in row[:n]], _values(row, n, metrics)) for row in groups]


def _by(name: str, dimensions: tuple[str, ...]) -> Callable[[Row], Any]:
    """A sort key: a dimension's value in byte order, or a metric's (rounded) value."""
    if name in dimensions:
        i = dimensions.index(name)
        return lambda row: row[0][i].encode("utf-8")
    return lambda row: row[1][name]


def _ordered_page(
    groups: Sequence[Sequence[Any]],
    dimensions: tuple[str, ...],
    metrics: Sequence[str],
    order_by: tuple[tuple[str, str], ...],
    limit: int,
    offset: int,
) -> list[Row]:
    """Every group ordered in Python, then the page (blocking: run in a thread)."""
    rows = _rows(groups, len(dimensions), metrics)  # order_by names queried metrics only
    for name, direction in reversed(order_by):  # stable sorts, last key first
        rows.sort(key=_by(name, dimensions), reverse=direction == "desc")
    return rows[offset : offset + limit]


async def fetch_v2(
    storage: Storage,
    query: Query,
    dimensions: tuple[str, ...],
    metrics: Sequence[str],
    order_by: tuple[tuple[str, str], ...],
    limit: int,
    offset: int,
) -> list[Row]:
    """The page ``offset``..``offset + limit`` of the groups in ``order_by`` (complete: every
    dimension named), each row (dimension values, {metric: value} of ``metrics``). Without
    dimensions there is at most one row: none when nothing is in the range (the caller answers
    zeros)."""
    sessions = any(m in SESSION_NUMBERS for m in metrics)
    params = filtered.parameters(query)
    n = len(dimensions)
    sql = page_sql(query, dimensions, order_by, limit, offset, sessions)
    page = await storage.report(sql.replace("{db}", storage.database), params)
    if any(name == "visit_duration" for name, _ in order_by) and page and page[0][-1]:
        # Some group has a duration out of scale: order every group in Python, exactly.
        every = groups_sql(query, dimensions, sessions, outside=True)
        groups = await storage.report(every.replace("{db}", storage.database), params)
        return await asyncio.to_thread(
            _ordered_page, groups, dimensions, metrics, order_by, limit, offset
        )
    if "visit_duration" in metrics and any(row[n + OUTSIDE_N] for row in page):
        # A row of the page has a duration out of scale: the page again, with their pairs.
        sql = page_sql(query, dimensions, order_by, limit, offset, sessions, outside=True)
        page = await storage.report(sql.replace("{db}", storage.database), params)
    return await asyncio.to_thread(_rows, page, n, metrics)

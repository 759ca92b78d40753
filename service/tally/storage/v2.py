"""The v2 query API's runner: executes ``tally.query.v2``'s SQL and makes one page of results,
each row (its dimension values, {metric: value}).

The order and the page are taken in SQL (query/v2.py), so only the page's rows (at most 10000)
come back, and what Python does per row (the rounding of ``bounce_rate`` and ``visit_duration``
with Decimal) runs in a thread, off the event loop: a query of 270k groups held the worker's loop
for seconds before, health checks and collects waiting behind it. When SQL cannot order exactly
(a ``visit_duration`` order over a total that is not a whole number of milliseconds below 2^53)
every group is read and ordered in Python, in a thread too."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from ..domain.metrics import bounce_rate, mean_ms
from ..query import Query, filtered
from ..query.v2 import NUMBERS, SESSION_NUMBERS, groups_sql, page_sql
from .client import Storage

Row = tuple[list[str], dict[str, Any]]


def _values(row: Sequence[Any], n: int, metrics: Sequence[str]) -> dict[str, Any]:
    """The metrics asked for of one group row (d0.., then ``NUMBERS``)."""
    numbers = dict(zip(NUMBERS, row[n : n + len(NUMBERS)], strict=True))
    out: dict[str, Any] = {}
    for name in metrics:
        if name == "bounce_rate":
            out[name] = bounce_rate(int(numbers["bounced"]), int(numbers["with_pv"]))
        elif name == "visit_duration":
            out[name] = mean_ms(float(numbers["total"] or 0), int(numbers["ends"]))
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
        # Some group's total is fractional or past 2^53: order every group in Python.
        every = groups_sql(query, dimensions, sessions).replace("{db}", storage.database)
        groups = await storage.report(every, params)
        return await asyncio.to_thread(
            _ordered_page, groups, dimensions, metrics, order_by, limit, offset
        )
    return await asyncio.to_thread(_rows, page, n, metrics)

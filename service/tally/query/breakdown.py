"""``GET /api/breakdown``: one dimension's rows over a :class:`Query`'s window, as SQL.

Dimensions are of two kinds. An event dimension is a column of each event (its path, name,
referrer, country, browser, ...). A session dimension belongs to the session: acquisition
(source, channel, utm_*) is the session's first event's, the entry page its first pageview's path
and the exit page its last pageview's, all within the window; every event of the session counts
under that value, as Plausible's visit dimensions do. Events without a session id stand for
themselves. Rows with an empty value are left out (as the dashboard's top lists do).

Where each is read (query/decider.py): a session dimension from ``sessions_quarter`` (schema 008:
per session and 15 minutes, its first and last values (schema 012: as numbers, query/firsts.py),
its visitors (schema 011: a plain array) and counts; a session's buckets in the window merge to
the raw table's answer exactly); country, browser, os and deviceType from ``audience_quarter``
(query/audience.py); event names from ``event_visitors`` and ``events_quarter`` (schema 020,
query/names.py); any other event dimension from the raw ``events`` table, a narrow read on
``(project_id, occurred_at)`` of the window's columns it needs. Visitors are exact (distinct
64-bit hashes of the visitor ids, as every rollup)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from . import audience, firsts, names
from .decider import AUDIENCE_ROLLUP, EVENT_ROLLUP, SESSIONS_ROLLUP, breakdown_table, decide
from .model import Query
from .sql import BREAKDOWN_ORDER, QUARTERS, WINDOW, bots, session_value


@dataclass(frozen=True)
class Dimension:
    api: str
    column: str
    per_session: bool  # the session's value (first event's, first or last pageview's)
    # per session: which event carries the value (query/sql.py's SESSION_VALUE names)
    pick: str = "first_event"


DIMENSIONS: dict[str, Dimension] = {
    d.api: d
    for d in (
        Dimension("path", "path", False),
        Dimension("entryPage", "path", True, "first_pageview"),
        Dimension("exitPage", "path", True, "last_pageview"),
        Dimension("source", "source", True),
        Dimension("channel", "channel", True),
        Dimension("referrer", "referrer", False),
        Dimension("utmSource", "utm_source", True),
        Dimension("utmMedium", "utm_medium", True),
        Dimension("utmCampaign", "utm_campaign", True),
        Dimension("utmContent", "utm_content", True),
        Dimension("utmTerm", "utm_term", True),
        Dimension("country", "country", False),
        Dimension("browser", "browser", False),
        Dimension("os", "os", False),
        Dimension("deviceType", "device_type", False),
        Dimension("event", "name", False),
    )
}
By = Literal[
    "path",
    "entryPage",
    "exitPage",
    "source",
    "channel",
    "referrer",
    "utmSource",
    "utmMedium",
    "utmCampaign",
    "utmContent",
    "utmTerm",
    "country",
    "browser",
    "os",
    "deviceType",
    "event",
]
MAX_LIMIT = 1000
DEFAULT_LIMIT = 10  # rows when the request does not say
NIL_UUID = "toUUID('00000000-0000-0000-0000-000000000000')"


def sessions_rollup_sql(query: Query) -> str:
    """A session dimension's rows from ``sessions_quarter``, under session filters if any: one
    group per session (its buckets in the window merged) holding the hashes of its values
    (schema 012, query/firsts.py), kept when they pass every filter; then one row per value hash,
    named from ``session_values`` for the rows returned (the top rows and every row tied with the
    last of them), in the contract's order. Filter values are the ``f0``, ``f1``, ...
    parameters."""
    dimension = query.dimension or ""
    hashes = {dimension: "h0"}
    for f in query.filters:
        hashes.setdefault(f.dimension.name, f"h{len(hashes)}")
    columns = ", ".join(f"{firsts.hash_of(name)} AS {alias}" for name, alias in hashes.items())
    kept = "".join(
        f" AND {firsts.match(hashes[f.dimension.name], f, f'f{i}')}"
        for i, f in enumerate(query.filters)
    )
    rows = f"""
        SELECT h0 AS h, uniqExactArray(vs) AS visitors, sum(pv) AS pageviews, sum(n) AS events
        FROM (SELECT {columns}, groupArrayArray(visitor_list) AS vs,
                     sum(pageviews) AS pv, sum(events) AS n
              FROM {{db}}.sessions_quarter
              WHERE {QUARTERS}{bots(query)} AND {firsts.candidate_keys(query, QUARTERS)}
              GROUP BY session_key, sessioned HAVING n > 0)
        WHERE h0 NOT IN {firsts.NO_VALUE}{kept}
        GROUP BY h0"""
    return firsts.named_rows(rows, dimension)


def breakdown_sql(query: Query) -> str:
    """One query: (value, visitors, pageviews, events) rows, in the contract's order."""
    if query.dimension not in DIMENSIONS:
        raise ValueError(f"unknown dimension {query.dimension!r}")
    table = breakdown_table(query)
    if table == SESSIONS_ROLLUP:
        return sessions_rollup_sql(query)
    if table == AUDIENCE_ROLLUP:
        return audience.breakdown_sql(query)
    if table == EVENT_ROLLUP:
        return names.breakdown_sql(query)
    if query.filters:
        raise ValueError("a filtered breakdown of an event dimension reads query/filtered.py")
    return raw_breakdown_sql(query)


def raw_breakdown_sql(query: Query) -> str:
    """The same rows from the raw table (no filters): every dimension, exact."""
    dim = DIMENSIONS[query.dimension or ""]
    where = f"{WINDOW}{bots(query)}"
    visitor = "visitor_hash"  # schema 009: sipHash64(visitor_id), 0 without one
    if not dim.per_session:
        return f"""
            SELECT toString({dim.column}) AS value,
                   uniqExactIf({visitor}, visitor_hash != 0) AS visitors,
                   countIf(name = 'pageview') AS pageviews, count() AS events
            FROM {{db}}.events WHERE {where} AND {dim.column} != ''
            GROUP BY value {BREAKDOWN_ORDER}"""
    value = session_value(dim.column, dim.pick)
    # One group per session; an event without a session id is a group of its own.
    return f"""
        SELECT value, uniqExactArray(vs) AS visitors, sum(pv) AS pageviews, sum(n) AS events
        FROM (SELECT {value} AS value,
                     groupUniqArrayIf({visitor}, visitor_hash != 0) AS vs,
                     countIf(name = 'pageview') AS pv, count() AS n
              FROM {{db}}.events WHERE {where}
              GROUP BY session_id, if(session_id = '', event_id, {NIL_UUID}))
        WHERE value != ''
        GROUP BY value {BREAKDOWN_ORDER}"""


def breakdown_parameters(query: Query) -> dict[str, Any]:
    plan = decide(query)
    params: dict[str, Any] = {
        "p": query.project_id,
        "t0": plan.start,
        "t1": plan.end,
        "limit": query.limit,
    }
    for i, flt in enumerate(query.filters):
        params[f"f{i}"] = list(flt.values)
    return params

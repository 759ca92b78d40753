"""``GET /api/breakdown``: one dimension's rows over a :class:`Query`'s window, as SQL.

Dimensions are of two kinds. An event dimension is a column of each event (its path, name,
referrer, country, browser, ...). A session dimension belongs to the session: acquisition
(source, channel, utm_*) is the session's first event's, the entry page its first pageview's path
and the exit page its last pageview's, all within the window; every event of the session counts
under that value, as Plausible's visit dimensions do. Events without a session id stand for
themselves. Rows with an empty value are left out (as the dashboard's top lists do).

Where each is read (query/decider.py): a session dimension from ``sessions_quarter`` (schema 008:
per session and 15 minutes, the states of its first and last values, its visitors (schema 011:
a plain array) and counts; a session's buckets in the window merge to the raw table's answer
exactly); country, browser, os and deviceType from ``audience_quarter`` (query/audience.py);
any other event dimension from the raw ``events`` table, a narrow read on
``(project_id, occurred_at)`` of the window's columns it needs. Visitors are exact (distinct
64-bit hashes of the visitor ids, as every rollup)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from . import audience
from .decider import AUDIENCE_ROLLUP, SESSIONS_ROLLUP, breakdown_table, decide
from .filtered import match  # the raw path's matching: the same SQL on the same values
from .model import Query
from .sql import WINDOW, bots

QUARTERS_WINDOW = (
    "project_id = {p:String} AND bucket >= {t0:DateTime('UTC')} AND bucket < {t1:DateTime('UTC')}"
)
# sessions_quarter's column of each session dimension's state, and its merge function.
SESSION_STATES = {
    "source": "argMinMerge(source)",
    "channel": "argMinMerge(channel)",
    "utmSource": "argMinMerge(utm_source)",
    "utmMedium": "argMinMerge(utm_medium)",
    "utmCampaign": "argMinMerge(utm_campaign)",
    "utmContent": "argMinMerge(utm_content)",
    "utmTerm": "argMinMerge(utm_term)",
    "entryPage": "argMinMerge(entry_page)",
    "exitPage": "argMaxMerge(exit_page)",
}


@dataclass(frozen=True)
class Dimension:
    api: str
    column: str
    per_session: bool  # the session's value (first event's, first or last pageview's)
    pick: str = "first"  # per-session: "first" event, "entry" pageview or "exit" pageview


DIMENSIONS: dict[str, Dimension] = {
    d.api: d
    for d in (
        Dimension("path", "path", False),
        Dimension("entryPage", "path", True, "entry"),
        Dimension("exitPage", "path", True, "exit"),
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
NIL_UUID = "toUUID('00000000-0000-0000-0000-000000000000')"
ORDER = "ORDER BY visitors DESC, pageviews DESC, value ASC LIMIT {limit:UInt32}"


# Schema 012: sessions_quarter's number of each session dimension's first value (the exit page's
# last): its time above cityHash64(value); its merge, and session_values' dimension naming it.
SESSION_NUMBERS = {
    "source": ("min(source_first)", "source"),
    "channel": ("min(channel_first)", "channel"),
    "utmSource": ("min(utm_source_first)", "utm_source"),
    "utmMedium": ("min(utm_medium_first)", "utm_medium"),
    "utmCampaign": ("min(utm_campaign_first)", "utm_campaign"),
    "utmContent": ("min(utm_content_first)", "utm_content"),
    "utmTerm": ("min(utm_term_first)", "utm_term"),
    "entryPage": ("min(entry_page_first)", "path"),
    "exitPage": ("max(exit_page_last)", "path"),
}
# The hashes that name no value: the neutral numbers' low 64 bits (a session without a
# pageview has no entry or exit page) and the empty string's.
NO_VALUE = "(0, 18446744073709551615, cityHash64(''))"


def sessions_rollup_sql(query: Query) -> str:
    """A session dimension's rows from ``sessions_quarter``: one group per session (its buckets
    in the window merged), then one row per value. Without filters the session's value is its
    number's hash (schema 012), named from ``session_values`` for the rows returned: the top rows
    and every row tied with the last of them, then the contract's order with the names."""
    if query.filters:
        return filtered_sessions_rollup_sql(query)
    merge, kind = SESSION_NUMBERS[query.dimension or ""]
    return f"""
        SELECT value, visitors, pageviews, events
        FROM (SELECT h, uniqExactArray(vs) AS visitors, sum(pv) AS pageviews, sum(n) AS events
              FROM (SELECT toUInt64({merge}) AS h, groupArrayArray(visitor_list) AS vs,
                           sum(pageviews) AS pv, sum(events) AS n
                    FROM {{db}}.sessions_quarter WHERE {QUARTERS_WINDOW}{bots(query)}
                    GROUP BY session_key, sessioned HAVING n > 0)
              WHERE h NOT IN {NO_VALUE}
              GROUP BY h ORDER BY visitors DESC, pageviews DESC LIMIT {{limit:UInt32}} WITH TIES
             ) AS top
        INNER JOIN (SELECT value_hash, any(value) AS value FROM {{db}}.session_values
                    WHERE project_id = {{p:String}} AND dimension = '{kind}'
                    GROUP BY value_hash) AS named ON named.value_hash = top.h
        {ORDER}"""


def filtered_sessions_rollup_sql(query: Query) -> str:
    """The same rows under filters on session dimensions, from the string states of the
    session's values (schema 008): kept when its values match every filter. Filter values are
    the ``f0``, ``f1``, ... parameters of query/filtered.py."""
    dimension = query.dimension or ""
    values = {dimension: SESSION_STATES[dimension]}
    for f in query.filters:
        values.setdefault(f.dimension.name, SESSION_STATES[f.dimension.name])
    names = {name: f"v{i}" for i, name in enumerate(values)}
    columns = ", ".join(f"{merge} AS {names[name]}" for name, merge in values.items())
    kept = " AND ".join(
        match(names[f.dimension.name], f, f"f{i}") for i, f in enumerate(query.filters)
    )
    return f"""
        SELECT value, uniqExactArray(vs) AS visitors, sum(pv) AS pageviews, sum(n) AS events
        FROM (SELECT {names[dimension]} AS value, vs, pv, n
              FROM (SELECT {columns}, groupArrayArray(visitor_list) AS vs,
                           sum(pageviews) AS pv, sum(events) AS n
                    FROM {{db}}.sessions_quarter WHERE {QUARTERS_WINDOW}{bots(query)}
                    GROUP BY session_key, sessioned)
              WHERE {kept or "1"})
        WHERE value != ''
        GROUP BY value {ORDER}"""


def breakdown_sql(query: Query) -> str:
    """One query: (value, visitors, pageviews, events) rows, in the contract's order."""
    if query.dimension not in DIMENSIONS:
        raise ValueError(f"unknown dimension {query.dimension!r}")
    table = breakdown_table(query)
    if table == SESSIONS_ROLLUP:
        return sessions_rollup_sql(query)
    if table == AUDIENCE_ROLLUP:
        return audience.breakdown_sql(query)
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
            GROUP BY value {ORDER}"""
    value = {
        "first": f"argMin(toString({dim.column}), occurred_at)",
        "entry": f"argMinIf({dim.column}, occurred_at, name = 'pageview')",
        "exit": f"argMaxIf({dim.column}, occurred_at, name = 'pageview')",
    }[dim.pick]
    # One group per session; an event without a session id is a group of its own.
    return f"""
        SELECT value, uniqExactArray(vs) AS visitors, sum(pv) AS pageviews, sum(n) AS events
        FROM (SELECT {value} AS value,
                     groupUniqArrayIf({visitor}, visitor_hash != 0) AS vs,
                     countIf(name = 'pageview') AS pv, count() AS n
              FROM {{db}}.events WHERE {where}
              GROUP BY session_id, if(session_id = '', event_id, {NIL_UUID}))
        WHERE value != ''
        GROUP BY value {ORDER}"""


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

"""``GET /api/breakdown``: one dimension's rows over a :class:`Query`'s window, as SQL.

Dimensions are of two kinds. An event dimension is a column of each event (its path, name,
referrer, country, browser, ...). A session dimension belongs to the session: acquisition
(source, channel, utm_*) is the session's first event's, the entry page its first pageview's path
and the exit page its last pageview's, all within the window; every event of the session counts
under that value, as Plausible's visit dimensions do. Events without a session id stand for
themselves. Rows with an empty value are left out (as the dashboard's top lists do).

Read from the raw ``events`` table (exact; a narrow read on ``(project_id, occurred_at)``):
docs/operations.md says what that costs and what would make it cheaper."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .decider import decide
from .model import Query
from .sql import WINDOW, bots


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


def breakdown_sql(query: Query) -> str:
    """One query: (value, visitors, pageviews, events) rows, in the contract's order."""
    if query.dimension not in DIMENSIONS:
        raise ValueError(f"unknown dimension {query.dimension!r}")
    dim = DIMENSIONS[query.dimension]
    where = f"{WINDOW}{bots(query)}"
    visitor = "sipHash64(visitor_id)"
    if not dim.per_session:
        return f"""
            SELECT toString({dim.column}) AS value,
                   uniqExactIf({visitor}, visitor_id != '') AS visitors,
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
                     groupUniqArrayIf({visitor}, visitor_id != '') AS vs,
                     countIf(name = 'pageview') AS pv, count() AS n
              FROM {{db}}.events WHERE {where}
              GROUP BY session_id, if(session_id = '', event_id, {NIL_UUID}))
        WHERE value != ''
        GROUP BY value {ORDER}"""


def breakdown_parameters(query: Query) -> dict[str, Any]:
    plan = decide(query)
    return {"p": query.project_id, "t0": plan.start, "limit": query.limit}

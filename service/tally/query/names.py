"""SQL of the breakdown by event name (``by=event``) without filters, over two rollups:
``event_visitors`` (schema 020: per project, calendar quarter, name, visitor and bot flag, the
15-minute UTC buckets in which that visitor sent that name) for the visitors, and
``events_quarter`` (per project, bucket, name and bot flag, the events) for the events and
pageviews.

A window starts and ends on 15-minute UTC boundaries (query/decider.py), so a visitor sent a name
in the window exactly when one of its buckets of that name lies in ``[t0, t1)``; rows of parts not
yet merged, and of two quarters, repeat a (name, visitor) pair, and distinct ``visitor_hash``
counts each visitor once.
A name's pageviews are its events when it is ``pageview``, else 0, as the raw table counts them.
Buckets older than the oldest one ``events_quarter`` holds for the project are not counted: under
a retention TTL a kept row (a visitor seen since) still lists the buckets of its expired events.
A filtered breakdown by event reads the raw table (query/filtered.py)."""

from __future__ import annotations

from .model import Query
from .sql import BREAKDOWN_ORDER, QUARTERS, bots

# The first bucket a visitor may count by: the window's start, or the oldest bucket still held.
SINCE = (
    "greatest({t0:DateTime('UTC')}, (SELECT min(bucket) FROM {db}.events_quarter "
    "WHERE project_id = {p:String}))"
)


def breakdown_sql(query: Query) -> str:
    """(value, visitors, pageviews, events) rows by event name, best first; parameters p, t0,
    t1 and limit (query/breakdown.py's breakdown_parameters)."""
    return f"""
        SELECT value, visitors, if(value = 'pageview', events, 0) AS pageviews, events
        FROM (SELECT toString(name) AS value, sum(events) AS events
              FROM {{db}}.events_quarter
              WHERE {QUARTERS}{bots(query)} AND name != ''
              GROUP BY value) AS counted
        LEFT JOIN (WITH {SINCE} AS since
                   SELECT toString(name) AS value,
                          uniqExactIf(visitor_hash,
                                      arrayExists(b -> b >= since AND b < {{t1:DateTime('UTC')}},
                                                  buckets)) AS visitors
                   FROM {{db}}.event_visitors
                   WHERE project_id = {{p:String}}{bots(query)}
                         AND quarter >= toStartOfQuarter({{t0:DateTime('UTC')}})
                         AND quarter < {{t1:DateTime('UTC')}}
                   GROUP BY value) AS seen USING value
        {BREAKDOWN_ORDER}"""

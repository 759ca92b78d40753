"""SQL over ``audience_quarter`` (schema 010): per project, 15-minute UTC bucket, country,
browser, os, device type, visitor and bot flag, its events and pageviews.

A filter on one of those four dimensions keeps events by their own value, so it is a ``WHERE`` on
these rows, and the kept events' counts, per local day or hour (a bucket lies in one local hour
of every zone, all offsets being multiples of 15 minutes), per browser or device type and in the
whole window, with their distinct visitors (the distinct non-zero ``visitor_hash`` of the kept
rows), are these rows' sums: exactly what the raw table gives (tests/test_audience_rollup.py).

- :func:`breakdown_sql`: a breakdown by one of the four under filters on those four only.
- :func:`facts_sql`: the filtered dashboard's timeline, heatmap, visitors, browsers and devices
  under such filters, as rows of query/onescan.py's *facts* (its grouping codes and columns), so
  that the raw read is left with the event names, paths, referrers and sessions alone."""

from __future__ import annotations

from .decider import AUDIENCE_COLUMNS
from .filtered import match
from .model import Query
from .sql import BREAKDOWN_ORDER, QUARTERS, bots

LOCAL = "toTimeZone(bucket, {tz:String})"


def answers(query: Query) -> bool:
    """Whether every filter of ``query`` is on one of the four (and there is at least one)."""
    return bool(query.filters) and all(f.dimension.name in AUDIENCE_COLUMNS for f in query.filters)


def kept(query: Query) -> str:
    """The rows of the window whose values match every filter (``f0``, ``f1``, ... as in
    query/filtered.py), bots left out when the project says so."""
    matched = "".join(
        " AND " + match(AUDIENCE_COLUMNS[f.dimension.name], f, f"f{i}")
        for i, f in enumerate(query.filters)
    )
    return f"{QUARTERS}{bots(query)}{matched}"


def breakdown_sql(query: Query) -> str:
    """(value, visitors, pageviews, events) rows of ``query.dimension`` (one of the four), best
    first; parameters p, t0, t1, limit and the filters' values."""
    column = AUDIENCE_COLUMNS[query.dimension or ""]
    return f"""
        SELECT toString({column}) AS value,
               uniqExactIf(visitor_hash, visitor_hash != 0) AS visitors,
               sum(pageviews) AS pageviews, sum(events) AS events
        FROM {{db}}.audience_quarter
        WHERE {kept(query)} AND {column} != ''
        GROUP BY value {BREAKDOWN_ORDER}"""


def facts_sql(query: Query, codes: dict[str, int]) -> str:
    """Rows (g, d, h, name, pth, ref, br, dev, c, pv, v) of the kept events per local day
    (``codes["d"]``), local hour (``"h"``), browser (``"br"``), device type (``"dev"``) and the
    whole window (``""``): query/onescan.py's facts rows of those grouping sets. Parameters
    as query/filtered.py's."""
    # grouping(d, h, br, dev): 0b0111 for the rows by day, 0b1011 by hour, 0b1101 by browser,
    # 0b1110 by device type, 0b1111 for the window; mapped to onescan's codes.
    mine = [codes[k] for k in ("d", "h", "br", "dev", "")]
    g = f"transform(grouping(d, h, br, dev), [7, 11, 13, 14, 15], {mine}, 0)"
    return f"""
        SELECT {g} AS g, toDate32({LOCAL}) AS d, toHour({LOCAL}) AS h, '' AS name, '' AS pth,
               '' AS ref, toString(browser) AS br, toString(device_type) AS dev,
               sum(events) AS c, sum(pageviews) AS pv,
               uniqExactIf(visitor_hash, visitor_hash != 0) AS v
        FROM {{db}}.audience_quarter
        WHERE {kept(query)}
        GROUP BY GROUPING SETS ((d), (h), (br), (dev), ())"""

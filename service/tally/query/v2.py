"""SQL of ``POST /api/v2/query``: the raw path's kept events (``query.filtered``) grouped by up to
four dimensions (Tally's and ``time:day`` / ``time:hour``, local to the project's zone). Two
queries: per group the event numbers, and per group the session numbers over the sessions with a
kept event in the group, whole (as the dashboard's session metrics). Rows with an empty dimension
value are left out. Ordering and pagination are the caller's (at most 10000 rows per page)."""

from __future__ import annotations

from ..domain.filters import DIMENSIONS
from .filtered import base_sql, kept_sql, session_value
from .model import Query

LOCAL = "toTimeZone(occurred_at, {tz:String})"


def _dimension_columns(query: Query, dimensions: tuple[str, ...]) -> tuple[str, str]:
    """(the kept events with d0, d1, ... columns; a condition that none of them is empty)."""
    columns, joins = [], []
    for i, name in enumerate(dimensions):
        if name == "time:day":
            columns.append(f"toString(toDate({LOCAL})) AS d{i}")
        elif name == "time:hour":
            columns.append(f"formatDateTime({LOCAL}, '%Y-%m-%d %H:00:00') AS d{i}")
        elif DIMENSIONS[name].is_session:
            dim = DIMENSIONS[name]
            value = session_value(dim.column, dim.session_value or "first_event")
            joins.append(
                f"LEFT JOIN (SELECT skey, {value} AS v FROM ({base_sql(query)}) GROUP BY skey)"
                f" AS j{i} ON k.skey = j{i}.skey"
            )
            columns.append(f"j{i}.v AS d{i}")
        else:
            columns.append(f"toString(k.{DIMENSIONS[name].column}) AS d{i}")
    columns.append("toUInt8(0) AS dz")  # a key when there is no dimension
    rows = (
        f"SELECT k.skey AS skey, k.session_id AS session_id, k.visitor_id AS visitor_id, "
        f"k.name AS name, {', '.join(columns)} FROM ({kept_sql(query)}) AS k {' '.join(joins)}"
    )
    keys = ", ".join([*(f"d{i}" for i in range(len(dimensions))), "dz"])
    nonempty = " AND ".join(f"d{i} != ''" for i in range(len(dimensions))) or "1"
    return f"SELECT * FROM ({rows}) WHERE {nonempty}", keys


def v2_sql(query: Query, dimensions: tuple[str, ...]) -> dict[str, str]:
    rows, keys = _dimension_columns(query, dimensions)
    ms = "toInt128(toUnixTimestamp64Milli(occurred_at))"
    unstated = "name = 'session_end' AND duration_ms IS NULL"
    return {
        "events": f"""
            SELECT {keys}, uniqExactIf(visitor_id, visitor_id != ''),
                   countIf(name = 'pageview'), count()
            FROM ({rows}) GROUP BY {keys}""",
        "sessions": f"""
            SELECT {keys}, countIf(sid != ''), countIf(sid != '' AND pv >= 1),
                   countIf(sid != '' AND pv = 1), sum(ends),
                   sum(stated) + toFloat64(sum(unstated_ms))
            FROM (SELECT DISTINCT {keys}, skey FROM ({rows})) AS g
            INNER JOIN (
                SELECT skey, any(session_id) AS sid, countIf(name = 'pageview') AS pv,
                       countIf(name = 'session_end') AS ends,
                       sumIf(assumeNotNull(duration_ms),
                             name = 'session_end' AND duration_ms IS NOT NULL) AS stated,
                       sumIf({ms}, {unstated}) - countIf({unstated}) * min({ms}) AS unstated_ms
                FROM ({base_sql(query)}) GROUP BY skey) AS st ON g.skey = st.skey
            GROUP BY {keys}""",
    }

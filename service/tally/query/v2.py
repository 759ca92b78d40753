"""SQL of ``POST /api/v2/query``: the raw path's kept events (``query.filtered``) grouped by up to
four dimensions (Tally's and ``time:day`` / ``time:hour``, local to the project's zone). Two
queries: per group the event numbers, and per group the session numbers over the sessions with a
kept event in the group, whole (as the dashboard's session metrics). Rows with an empty dimension
value are left out.

:func:`v2_sql` joins the two per group and, for :func:`page_sql`, orders the groups and takes the
requested page in SQL, so that a breakdown of 270k groups sends ten rows to Python, not 270k
(each of which cost the event loop a dict, a sort key and a Decimal: seconds during which the
worker answered nothing, health and collect included). The order is the documented one exactly:
a dimension's value in byte order (String comparison is byte order), an integer metric by value,
``bounce_rate`` and ``visit_duration`` by their *rounded* values (the numbers the answer shows,
so that rows showing the same number are ordered by the keys after), computed in integers:

- ``bounce_rate``: 100 * bounced / with_pv half up to 2 decimals is
  ``intDiv(20000 * bounced + with_pv, 2 * with_pv)`` hundredths (0 without a visit with a
  pageview);
- ``visit_duration``: total / ends half up to an integer is ``intDiv(2 * total + ends, 2 * ends)``
  when ``total`` is a whole number of milliseconds below 2^53 (every duration a tracker sends, and
  every time span); a fractional or larger total (a visitor can send ``durationMs`` 1e29) is not
  ordered exactly by a double in SQL, so such a result says so (``unexact``) and the caller orders
  it in Python instead (storage/v2.py)."""

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
                f"LEFT JOIN (SELECT skey, {value} AS v FROM ({base_sql(query, ordered=True)}) "
                "GROUP BY skey)"
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


# Exact as an integer: a double that is a whole number below 2^53.
WHOLE = "(total >= 0 AND total < 9007199254740992 AND total = floor(total))"
# The order keys of the metrics (README: bounce_rate 2 decimals, visit_duration an integer, both
# half up), in integers.
ORDER_KEYS = {
    "visitors": "visitors",
    "visits": "visits",
    "pageviews": "pageviews",
    "events": "events",
    "bounce_rate": "if(with_pv = 0, 0, intDiv(20000 * bounced + with_pv, 2 * with_pv))",
    "visit_duration": (
        f"if(ends = 0, 0, intDiv(2 * toUInt64(if({WHOLE}, total, 0)) + ends, 2 * ends))"
    ),
}
# The columns of a group after its dimension values (storage/v2.py reads them in this order).
NUMBERS = ("visitors", "pageviews", "events", "visits", "with_pv", "bounced", "ends", "total")
SESSION_NUMBERS = frozenset({"visits", "bounce_rate", "visit_duration"})


def groups_sql(query: Query, dimensions: tuple[str, ...], sessions: bool = True) -> str:
    """Every group: d0, d1, ... (its dimension values), then :data:`NUMBERS`. Without
    ``sessions`` (no visit metric asked for) the session numbers are 0 and not computed."""
    rows, keys = _dimension_columns(query, dimensions)
    named = ", ".join(f"d{i}" for i in range(len(dimensions)))
    events = f"""
            SELECT {keys}, uniqExactIf(visitor_id, visitor_id != '') AS visitors,
                   countIf(name = 'pageview') AS pageviews, count() AS events
            FROM ({rows}) GROUP BY {keys}"""
    head = f"{named}, " if named else ""
    if not sessions:
        return (
            f"SELECT {head}visitors, pageviews, events, toUInt64(0) AS visits, "
            "toUInt64(0) AS with_pv, toUInt64(0) AS bounced, toUInt64(0) AS ends, "
            f"toFloat64(0) AS total FROM ({events})"
        )
    ms = "toInt128(toUnixTimestamp64Milli(occurred_at))"
    unstated = "name = 'session_end' AND duration_ms IS NULL"
    per_session = f"""
            SELECT {keys}, countIf(sid != '') AS visits, countIf(sid != '' AND pv >= 1) AS with_pv,
                   countIf(sid != '' AND pv = 1) AS bounced, sum(st.ends) AS ends,
                   sum(stated) + toFloat64(sum(unstated_ms)) AS total
            FROM (SELECT DISTINCT {keys}, skey FROM ({rows})) AS g
            INNER JOIN (
                SELECT skey, any(session_id) AS sid, countIf(name = 'pageview') AS pv,
                       countIf(name = 'session_end') AS ends,
                       sumIf(assumeNotNull(duration_ms),
                             name = 'session_end' AND duration_ms IS NOT NULL) AS stated,
                       sumIf({ms}, {unstated}) - countIf({unstated}) * min({ms}) AS unstated_ms
                FROM ({base_sql(query)}) GROUP BY skey) AS st ON g.skey = st.skey
            GROUP BY {keys}"""
    return (
        f"SELECT {head}e.visitors AS visitors, e.pageviews AS pageviews, e.events AS events, "
        "s.visits AS visits, s.with_pv AS with_pv, s.bounced AS bounced, s.ends AS ends, "
        f"s.total AS total FROM ({events}) AS e LEFT JOIN ({per_session}) AS s USING ({keys})"
    )


def page_sql(
    query: Query,
    dimensions: tuple[str, ...],
    order_by: tuple[tuple[str, str], ...],
    limit: int,
    offset: int,
    sessions: bool = True,
) -> str:
    """The groups of one page, in ``order_by`` (complete: every dimension named, so the order is
    total), as :func:`groups_sql`'s columns; with ``visit_duration`` in the order, a last column
    ``unexact``: 1 on every row when some group's total is not a whole number below 2^53 (the
    order is then not exact, and the caller orders in Python)."""
    terms = []
    for name, direction in order_by:
        key = f"d{dimensions.index(name)}" if name in dimensions else ORDER_KEYS[name]
        terms.append(f"{key} {'DESC' if direction == 'desc' else 'ASC'}")
    extra = ""
    if any(name == "visit_duration" for name, _ in order_by):
        extra = f", max(ends > 0 AND NOT {WHOLE}) OVER () AS unexact"
    return (
        f"SELECT *{extra} FROM ({groups_sql(query, dimensions, sessions)}) "
        f"ORDER BY {', '.join(terms)} LIMIT {int(limit)} OFFSET {int(offset)}"
    )

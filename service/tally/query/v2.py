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
- ``visit_duration``: (stated + unstated) / ends half up to an integer, with ``stated`` the
  stated durations as a count of 10^-20 ms (query/durations.py: every duration with at most 20
  digits after the point and below 10^20 ms, as its double's shortest decimal, counts there
  exactly) and
  ``unstated`` the time spans in ms, is ``intDiv(2 * total + ends, 2 * ends)`` in that unit
  (Int256). A group with a duration out of that scale (a visitor can send ``durationMs`` 1e29 or
  5e-324: ``outside``) is not ordered exactly in SQL, so such a result says so (``unexact``)
  and the caller orders it in Python instead (storage/v2.py), from the exact sums."""

from __future__ import annotations

from ..domain.filters import DIMENSIONS
from .durations import NO_PAIRS, SCALE, outside_count, outside_pairs, scaled_sum
from .filtered import base_sql, kept_sql, session_value
from .model import Query

LOCAL = "toTimeZone(occurred_at, {tz:String})"


def _dimension_columns(query: Query, dimensions: tuple[str, ...]) -> tuple[str, str]:
    """(the kept events with d0, d1, ... columns; a condition that none of them is empty)."""
    columns, joins = [], []
    for i, name in enumerate(dimensions):
        if name == "time:day":
            columns.append(f"toString(toDate32({LOCAL})) AS d{i}")
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


# 10^-SCALE ms, the unit of ``stated`` (query/durations.py), as an Int256.
_ONE = f"toInt256('1{'0' * SCALE}')"
# The order keys of the metrics (README: bounce_rate 2 decimals, visit_duration an integer, both
# half up), in integers. visit_duration: (stated + unstated) / ends half up, in units of
# 10^-SCALE ms; exact unless a stated duration is out of scale (``outside``: see page_sql).
ORDER_KEYS = {
    "visitors": "visitors",
    "visits": "visits",
    "pageviews": "pageviews",
    "events": "events",
    "bounce_rate": "if(with_pv = 0, 0, intDiv(20000 * bounced + with_pv, 2 * with_pv))",
    "visit_duration": (
        f"if(ends = 0, 0, intDiv(2 * (toInt256(stated) + toInt256(unstated) * {_ONE})"
        f" + toInt256(ends) * {_ONE}, 2 * toInt256(ends) * {_ONE}))"
    ),
}
# The columns of a group after its dimension values (storage/v2.py reads them in this order):
# ``stated`` the stated durations in scale (10^-SCALE ms), ``outside_n`` how many others there
# are and ``outside`` those as (exponent, significands) pairs (only when asked for: gathered
# per session they cost 15% of a v2 query's time, for what a visitor seldom sends), and
# ``unstated`` the other session_end events' spans in ms.
NUMBERS = (
    *("visitors", "pageviews", "events", "visits", "with_pv", "bounced", "ends"),
    *("stated", "outside_n", "outside", "unstated"),
)
SESSION_NUMBERS = frozenset({"visits", "bounce_rate", "visit_duration"})


def groups_sql(
    query: Query, dimensions: tuple[str, ...], sessions: bool = True, outside: bool = False
) -> str:
    """Every group: d0, d1, ... (its dimension values), then :data:`NUMBERS`. Without
    ``sessions`` (no visit metric asked for) the session numbers are 0 and not computed.
    ``outside``: with the pairs of the stated durations out of scale (else empty; their count
    ``outside_n`` says when they are needed)."""
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
            f"toUInt256(0) AS stated, toUInt64(0) AS outside_n, {NO_PAIRS} AS outside, "
            "toInt128(0) AS unstated "
            f"FROM ({events})"
        )
    ms = "toInt128(toUnixTimestamp64Milli(occurred_at))"
    unstated = "name = 'session_end' AND duration_ms IS NULL"
    per_session = f"""
            SELECT {keys}, countIf(sid != '') AS visits, countIf(sid != '' AND pv >= 1) AS with_pv,
                   countIf(sid != '' AND pv = 1) AS bounced, sum(st.ends) AS ends,
                   sum(st.stated_s) AS stated, sum(st.outside_n) AS outside_n,
                   groupArrayArray(st.outside) AS outside, sum(unstated_ms) AS unstated
            FROM (SELECT DISTINCT {keys}, skey FROM ({rows})) AS g
            INNER JOIN (
                SELECT skey, any(session_id) AS sid, countIf(name = 'pageview') AS pv,
                       countIf(name = 'session_end') AS ends,
                       {scaled_sum()} AS stated_s, {outside_count()} AS outside_n,
                       {outside_pairs() if outside else NO_PAIRS} AS outside,
                       sumIf({ms}, {unstated}) - countIf({unstated}) * min({ms}) AS unstated_ms
                FROM ({base_sql(query)}) GROUP BY skey) AS st ON g.skey = st.skey
            GROUP BY {keys}"""
    return (
        f"SELECT {head}e.visitors AS visitors, e.pageviews AS pageviews, e.events AS events, "
        "s.visits AS visits, s.with_pv AS with_pv, s.bounced AS bounced, s.ends AS ends, "
        "s.stated AS stated, s.outside_n AS outside_n, s.outside AS outside, "
        "s.unstated AS unstated "
        f"FROM ({events}) AS e LEFT JOIN ({per_session}) AS s USING ({keys})"
    )


def page_sql(
    query: Query,
    dimensions: tuple[str, ...],
    order_by: tuple[tuple[str, str], ...],
    limit: int,
    offset: int,
    sessions: bool = True,
    outside: bool = False,
) -> str:
    """The groups of one page, in ``order_by`` (complete: every dimension named, so the order is
    total), as :func:`groups_sql`'s columns (``outside`` as there); with ``visit_duration`` in
    the order, a last column ``unexact``: 1 on every row when some group has a stated duration
    out of scale (the order is then not exact, and the caller orders in Python)."""
    terms = []
    for name, direction in order_by:
        key = f"d{dimensions.index(name)}" if name in dimensions else ORDER_KEYS[name]
        terms.append(f"{key} {'DESC' if direction == 'desc' else 'ASC'}")
    extra = ""
    if any(name == "visit_duration" for name, _ in order_by):
        extra = ", max(ends > 0 AND outside_n > 0) OVER () AS unexact"
    return (
        f"SELECT *{extra} FROM ({groups_sql(query, dimensions, sessions, outside)}) "
        f"ORDER BY {', '.join(terms)} LIMIT {int(limit)} OFFSET {int(offset)}"
    )

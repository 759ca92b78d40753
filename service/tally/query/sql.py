"""SQL for the dashboard, built from a :class:`Query` and its :class:`Plan`. Values reach SQL only
as server-side parameters (``{name:Type}``); what varies in the text (the bot filter, whether the
raw edge is read) is chosen here from code, never from request strings. ``{db}`` is the
database, filled in by the runner.

Parameters: p (project), t0/t1 (window start and end, UTC), tz (the zone), d0/d1 (the UTC days
the day rollups cover, d1 excluded), e0/e1 and e2/e3 (the raw edges), live (start of the live
window)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..domain.metrics import LIST_LIMIT, LIVE_WINDOW, RECENT_LIMIT
from ..domain.ranges import MAX_RANGE_DAYS
from .decider import Plan, decide
from .durations import outside_pairs, scaled_sum
from .model import Query

# Whole UTC days first_utc_day..last_utc_day, as a half-open range: an empty one (a window with
# no whole UTC day) must stay empty at the Date type's first day, where 1969-12-31 would be
# read as 1970-01-01 and that day's rollup rows added to the raw edges (found by testing).
DAY_RANGE = "project_id = {p:String} AND day >= {d0:Date} AND day < {d1:Date}"
QUARTERS = (
    "project_id = {p:String} AND bucket >= {t0:DateTime('UTC')} AND bucket < {t1:DateTime('UTC')}"
)
# Breakdown rows in the contract's order: visitors, then pageviews, descending, then the value.
BREAKDOWN_ORDER = "ORDER BY visitors DESC, pageviews DESC, value ASC LIMIT {limit:UInt32}"
# The raw edges: a partial first UTC day and, for a closed range, a partial last one (e2 = e3,
# an empty interval, when there is only one).
EDGE = (
    "project_id = {p:String} AND ((occurred_at >= {e0:DateTime64(3, 'UTC')}"
    " AND occurred_at < {e1:DateTime64(3, 'UTC')}) OR (occurred_at >= {e2:DateTime64(3, 'UTC')}"
    " AND occurred_at < {e3:DateTime64(3, 'UTC')}))"
)
WINDOW = (
    "project_id = {p:String} AND occurred_at >= {t0:DateTime64(3, 'UTC')}"
    " AND occurred_at < {t1:DateTime64(3, 'UTC')}"
)
# The order the events were stored in, for a session's first values and its last pageview when
# events share a millisecond: events sent together without a time all carry the receipt time,
# and they count in the order sent (the reference model's; the rollups number a row by its place
# in its INSERT, schema 012). MergeTree sorts an INSERT stably, so a part keeps the order of rows
# with equal keys, and a merge keeps its parts' order; a query numbers the parts it reads
# (_part_index) in the engine's order of part names, by partition and then first block number,
# so of two parts of one month the one inserted first comes first. One number, (epoch ms << 64) |
# (part index << 40) | row in the part: as fast as the time alone on a 10M-event tenant's raw
# breakdown, where a tuple with the block number parsed from the part's name was 40% slower.
STORED_ORDER = (
    "bitOr(bitShiftLeft(toUInt128(toUnixTimestamp64Milli(occurred_at)), 64),"
    " bitOr(bitShiftLeft(toUInt64(_part_index), 40), _part_offset))"
)
# A session's value of a column, read from its raw events ordered by ``{o}``.
SESSION_VALUE = {
    "first_event": "argMin(toString({c}), {o})",
    "first_pageview": "argMinIf(toString({c}), {o}, name = 'pageview')",
    "last_pageview": "argMaxIf(toString({c}), {o}, name = 'pageview')",
}


def session_value(column: str, pick: str, order: str = STORED_ORDER) -> str:
    """The aggregate giving a session's ``pick`` ("first_event", "first_pageview" or
    "last_pageview") value of ``column`` over rows whose stored order is ``order``."""
    return SESSION_VALUE[pick].format(c=column, o=order)


LOCAL_DAY = "toDate32(toTimeZone(bucket, {tz:String}))"
LOCAL_HOUR = "toHour(toTimeZone(bucket, {tz:String}))"

# grouping(d, name, h) of the events_quarter scan: which grouping set a row belongs to.
PER_DAY, PER_NAME, PER_HOUR = 0b011, 0b101, 0b110


def bots(query: Query) -> str:
    """The filter that leaves bot rows out, or nothing when bots count like everyone."""
    return " AND is_bot = 0" if query.exclude_bots else ""


def _with_edge(plan: Plan, rollup: str, raw: str) -> str:
    """A rollup's rows for the whole UTC days, and the raw table's for the partial first one."""
    if not plan.uses_raw_edge:
        return rollup
    return f"{rollup}\n        UNION ALL\n        {raw}"


def dashboard_sql(query: Query, plan: Plan | None = None) -> dict[str, str]:
    """Every dashboard query by name. They are independent and may run concurrently."""
    plan = plan or decide(query)
    b = bots(query)
    out: dict[str, str] = {}
    # Per session: pageviews, first event, session_end events without a stated duration (see
    # the runner for the maths). The day rollup's rows are not grouped first: one grouping.
    session_rows = _with_edge(
        plan,
        f"SELECT session_hash, pageviews AS pv, first_at, ends - ends_stated AS unstated "
        f"FROM {{db}}.session_days WHERE {DAY_RANGE}{b}",
        "SELECT if(session_id = '', toUInt64(0), sipHash64(session_id)) AS session_hash, "
        "toUInt64(name = 'pageview') AS pv, occurred_at AS first_at, "
        "toInt64(name = 'session_end' AND duration_ms IS NULL) AS unstated "
        f"FROM {{db}}.events WHERE {EDGE}{b}",
    )
    out["sessions"] = f"""
        SELECT countIf(session_hash != 0), countIf(session_hash != 0 AND pv >= 1),
               countIf(session_hash != 0 AND pv = 1),
               sumIf(toInt128(unstated) * first_ms, session_hash != 0)
        FROM (SELECT session_hash, sum(pv) AS pv,
                     toUnixTimestamp64Milli(min(first_at)) AS first_ms,
                     sum(unstated) AS unstated
              FROM ({session_rows}) GROUP BY session_hash)"""
    # Additive sums: from session_days' per-day projection (day_sums, schema 019), plus the
    # edge. The stated durations exactly: in 10^-SCALE ms, and the rare others as pairs.
    out["session_ends"] = f"""
        SELECT sum(ends), sumIf(toInt128(unstated_at_ms), session_hash != 0),
               sum(stated_scaled), groupArrayArray(stated_outside)
        FROM {{db}}.session_days WHERE {DAY_RANGE}{b}"""
    if plan.uses_raw_edge:
        out["session_ends_edge"] = f"""
            SELECT countIf(name = 'session_end'),
                   sumIf(toInt128(toUnixTimestamp64Milli(occurred_at)),
                         name = 'session_end' AND duration_ms IS NULL AND session_id != ''),
                   {scaled_sum()}, {outside_pairs()}
            FROM {{db}}.events WHERE {EDGE}{b}"""
    # Distinct visitors per local day (g = 0) and in the window (g = 1).
    if plan.utc_days and query.exclude_bots:
        # Local days are UTC days: visitors_daily holds one row per day, visitor and bot flag
        # once merged (FINAL: a merge in key order, of today's rows only as a rule), so a day's
        # visitors are its rows, and the window's a distinct count of fewer rows than the
        # 15-minute rollup's. The same numbers for about two thirds of the CPU.
        out["visitors"] = f"""
            SELECT 0 AS g, day AS d, count() FROM {{db}}.visitors_daily FINAL
            WHERE {DAY_RANGE}{b} GROUP BY day
            UNION ALL
            SELECT 1, {{d0:Date}}, uniqExact(visitor_hash) FROM {{db}}.visitors_daily
            WHERE {DAY_RANGE}{b}"""
    else:  # one scan of the 15-minute rollup
        out["visitors"] = f"""
            SELECT grouping(d) AS g, {LOCAL_DAY} AS d, uniqExact(visitor_hash)
            FROM {{db}}.visitors_quarter WHERE {QUARTERS}{b}
            GROUP BY GROUPING SETS ((d), ())"""
    # Timeline per local day, event names, heatmap per local hour: one scan of few rows. The
    # LIMIT BY bounds the names (cut to LIST_LIMIT later) and keeps every day of the longest
    # range, a from/to of MAX_RANGE_DAYS (``days`` is at most 90).
    out["quarters"] = f"""
        SELECT grouping(d, name, h) AS g, {LOCAL_DAY} AS d, name, {LOCAL_HOUR} AS h,
               sum(events) AS c, sumIf(events, name = 'pageview')
        FROM {{db}}.events_quarter WHERE {QUARTERS}{b}
        GROUP BY GROUPING SETS ((d), (name), (h))
        ORDER BY g, c DESC, name ASC LIMIT {MAX_RANGE_DAYS} BY g"""
    if query.exclude_bots:
        out["bots"] = f"""
            SELECT sum(events) FROM {{db}}.events_quarter WHERE {QUARTERS} AND is_bot = 1"""
    client_rows = _with_edge(
        plan,
        f"SELECT browser, device_type, events FROM {{db}}.clients_daily WHERE {DAY_RANGE}{b}",
        f"SELECT browser, device_type, toUInt64(1) AS events FROM {{db}}.events WHERE {EDGE}{b}",
    )
    out["clients"] = f"""
        SELECT grouping(browser) AS g, if(g = 0, toString(browser), toString(device_type)) AS key,
               sum(events) AS c
        FROM ({client_rows})
        GROUP BY GROUPING SETS ((browser), (device_type))
        ORDER BY g, c DESC, key ASC LIMIT {LIST_LIMIT} BY g"""
    for name, column in (("paths", "path"), ("referrers", "referrer")):
        rollup = f"{{db}}.{name}_daily WHERE {DAY_RANGE}{b}"
        if not plan.uses_raw_edge:  # the shape the UTC dashboard always had
            out[name] = f"""
                SELECT {column}, sum(views) AS c FROM {rollup}
                GROUP BY {column} ORDER BY c DESC, {column} ASC LIMIT {LIST_LIMIT}"""
            continue
        rows = _with_edge(
            plan,
            f"SELECT {column}, views FROM {rollup}",
            f"SELECT {column}, toUInt64(1) AS views FROM {{db}}.events "
            f"WHERE {EDGE}{b} AND name = 'pageview' AND {column} != ''",
        )
        out[name] = f"""
            SELECT {column}, sum(views) AS c FROM ({rows})
            GROUP BY {column} ORDER BY c DESC, {column} ASC LIMIT {LIST_LIMIT}"""
    out["recent"] = f"""
        SELECT toString(event_id), name, path, visitor_id, occurred_at FROM {{db}}.events
        WHERE {WINDOW}{b}
        ORDER BY occurred_at DESC LIMIT {RECENT_LIMIT}"""
    out["live"] = live_sql(query.exclude_bots)
    return out


def live_sql(exclude_bots: bool) -> str:
    """Live visitors: the distinct non-empty visitor ids with an event from ``{live}`` to
    ``{now}`` (:func:`live_parameters`); the primary key's (project_id, occurred_at) prefix
    limits the read to those rows. Bounded by now too: after the clock was set back, events
    stored before carry later times, and they counted as live for as long as the step."""
    return f"""
        SELECT uniqExact(visitor_id) FROM {{db}}.events
        WHERE project_id = {{p:String}} AND occurred_at >= {{live:DateTime64(3, 'UTC')}}
          AND occurred_at <= {{now:DateTime64(3, 'UTC')}} AND visitor_id != ''
          {" AND is_bot = 0" if exclude_bots else ""}"""


def live_parameters(now: datetime) -> dict[str, Any]:
    """:func:`live_sql`'s window: the ``LIVE_WINDOW`` up to ``now``."""
    return {"live": now - LIVE_WINDOW, "now": now}


def parameters(query: Query, plan: Plan | None = None) -> dict[str, Any]:
    plan = plan or decide(query)
    params: dict[str, Any] = {
        "p": query.project_id,
        "t0": plan.start,
        "t1": plan.end,
        "tz": query.tz,
        "d0": plan.first_utc_day,
        "d1": plan.day_after_last,
        **live_parameters(query.now),
    }
    if plan.uses_raw_edge:
        params["e0"], params["e1"], params["e2"], params["e3"] = plan.edges()
    return params

"""SQL of the raw path (issue 17): the dashboard and breakdowns under filters, or over an explicit
``from``/``to`` range, read from the raw ``events`` table (a narrow read on
``(project_id, occurred_at)``), exactly as the README section "Filters, ranges and comparison" and
tests/reference_filters.py define:

- *base*: the window's events, bots left out when the project says so. A session is the events of
  one non-empty ``session_id``; an event without one is a session of its own (``skey``, the
  64-bit ``session_key`` of schema 009; distinct visitors count ``visitor_hash``).
- Session filters keep the sessions whose value (first event's, first or last pageview's path, in
  the window) matches: a semi-join on ``skey`` with the matching sessions of ``sessions_quarter``,
  whose merged numbers hold those values' hashes (schema 012, query/firsts.py), matched on the
  names ``session_values`` holds. Event filters then keep the matching events of those sessions:
  *kept*. A session dimension's value in a breakdown comes from there too, named for the rows
  returned. ``rollup=False`` groups the window's raw events by session instead: the tests compare
  both.
- Every event number reads *kept*; session metrics read every event of base of the sessions
  with a kept event (*kept sessions*, whole).

Filter values reach SQL only as ``Array(String)`` server-side parameters (``f0``, ``f1``, ...);
the SQL text varies only with the filters' operators and dimensions, which come from code."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..domain.filters import DIMENSIONS, Filter, event_filters, session_filters
from ..domain.metrics import LIST_LIMIT, RECENT_LIMIT
from .decider import decide
from .durations import (
    STATED,
    outside_pairs,
    outside_value,
    parts_of_doubles,
    scaled_pairs,
    scaled_sum,
    scaled_value,
    stated_parts,
)
from .firsts import NO_VALUE, hash_of, hit, named_rows
from .firsts import match as number_match
from .model import Query
from .sql import (
    BREAKDOWN_ORDER,
    DAY_RANGE,
    EDGE,
    STORED_ORDER,
    bots,
    live_parameters,
    live_sql,
)
from .sql import session_value as sql_session_value

RANGE = (
    "project_id = {p:String} AND occurred_at >= {t0:DateTime64(3, 'UTC')}"
    " AND occurred_at < {t1:DateTime64(3, 'UTC')}"
)
# The session key (schema 009, sessions_quarter's): an event without a session id is its own.
SKEY = "session_key"
QUARTERS = (
    "project_id = {p:String} AND bucket >= {q0:DateTime('UTC')} AND bucket < {q1:DateTime('UTC')}"
)
LOCAL = "toTimeZone(occurred_at, {tz:String})"
# Under session filters the latest kept events are looked for among this many latest events
# (:func:`latest_kept_sql`).
RECENT_CANDIDATES = 2000


def session_value(f_column: str, pick: str) -> str:
    """A session's value of ``f_column`` over base's rows (events that share a millisecond in
    the order stored: :data:`STORED_ORDER`)."""
    return sql_session_value(f_column, pick, "stored_order")


def match(expr: str, flt: Filter, param: str) -> str:
    """``expr`` (a string) passes ``flt``; its values are the ``param`` parameter."""
    found = hit(expr, flt, param)
    return f"NOT {found}" if flt.negated else found


def base_sql(query: Query, ordered: bool = False) -> str:
    """The window's events. ``ordered``: with ``stored_order`` (:data:`STORED_ORDER`), for
    :func:`session_value` over them; only then, as the views that select every column of base
    ran 10-25% slower with it (a 10M-event tenant's filtered dashboards and breakdowns)."""
    order = f", {STORED_ORDER} AS stored_order" if ordered else ""
    return (
        f"SELECT *, {SKEY} AS skey, visitor_hash, duration_digits, duration_exponent{order} "
        f"FROM {{db}}.events WHERE {RANGE}{bots(query)}"
    )


def sessions_sql(query: Query, values: str) -> str:
    """One row per session of the window from sessions_quarter: skey and ``values``."""
    return (
        f"SELECT session_key AS skey, {values} FROM {{db}}.sessions_quarter "
        f"WHERE {QUARTERS}{bots(query)} GROUP BY session_key, sessioned"
    )


def _raw_sessions_sql(query: Query, values: str) -> str:
    """One row per session of the window grouped from the raw events: skey and ``values``
    (written with :func:`session_value`). What sessions_quarter answers, read the long way: the
    tests force it to check that both give the same numbers."""
    return f"SELECT skey, {values} FROM ({base_sql(query, ordered=True)}) GROUP BY skey"


def _sessions(query: Query, values: Mapping[str, tuple[str, str]]) -> str:
    """Per session of the window grouped from the raw events, each named value
    {alias: (column, pick)}."""
    return _raw_sessions_sql(
        query, ", ".join(f"{session_value(c, p)} AS {a}" for a, (c, p) in values.items())
    )


def session_filters_having(query: Query) -> str:
    """The session filters of ``query`` on a session's sessions_quarter rows grouped (a
    ``HAVING``): each on the hash of its value (schema 012, query/firsts.py); "1" for none."""
    return (
        " AND ".join(
            number_match(hash_of(f.dimension.name), f, f"f{i}")
            for i, f in enumerate(query.filters)
            if f.dimension.is_session
        )
        or "1"
    )


def kept_conditions(query: Query, rollup: bool = True) -> tuple[str, str]:
    """(session condition, event condition) on base's rows: the session filters' semi-join on
    ``skey`` (true of every event of a matching session) and the event filters; "1" for none.
    ``rollup``: session filters find their sessions in sessions_quarter (else by grouping the
    raw events: the same sessions)."""
    names = {id(f): f"f{i}" for i, f in enumerate(query.filters)}
    session = "1"
    by_session = session_filters(query.filters)
    if by_session:
        if rollup:
            # The matching sessions from sessions_quarter (one row per session and 15 minutes)
            # rather than by grouping the window's raw events by session: the same values, as
            # hashes matched on session_values' names (schema 012, query/firsts.py).
            # Every session of the window is grouped here, on its key and value hashes alone:
            # restricting it to the candidates first (firsts.candidate_keys) took longer, 245 ms
            # against 200 on a 10M-event tenant's 1.5M sessions, since the restriction cost more
            # than the narrow grouping it saved.
            session = (
                f"skey IN (SELECT session_key FROM {{db}}.sessions_quarter WHERE {QUARTERS}"
                f"{bots(query)} GROUP BY session_key, sessioned "
                f"HAVING {session_filters_having(query)})"
            )
        else:
            values = {
                f"v{j}": (f.dimension.column, f.dimension.session_value or "first_event")
                for j, f in enumerate(by_session)
            }
            matched = " AND ".join(
                match(f"v{j}", f, names[id(f)]) for j, f in enumerate(by_session)
            )
            sessions = _sessions(query, values)
            session = f"skey IN (SELECT skey FROM ({sessions}) WHERE {matched})"
    events = [match(f.dimension.column, f, names[id(f)]) for f in event_filters(query.filters)]
    return session, " AND ".join(events) or "1"


def session_metrics_sql(query: Query, sessions: str) -> str:
    """(sessions, with a pageview, bounced, session_end events, their stated durations as
    (exponent, sum of significands) pairs, the other ends' durations in ms) over the window's
    events of the sessions that ``sessions`` (a condition on base's rows) keeps, each session
    whole; events without a session id count in none of the session figures. The stated
    durations are summed exactly (query/durations.py); ``domain.metrics.stated_total`` adds the
    pairs up."""
    ms = "toInt128(toUnixTimestamp64Milli(occurred_at))"
    unstated = "name = 'session_end' AND duration_ms IS NULL"
    stated = scaled_pairs("sum(stated)", "groupArrayArray(outside)")
    return f"""
        SELECT countIf(sid != ''), countIf(sid != '' AND pv >= 1), countIf(sid != '' AND pv = 1),
               sum(ends), {stated}, sum(unstated_ms)
        FROM (SELECT any(session_id) AS sid, countIf(name = 'pageview') AS pv,
                     countIf(name = 'session_end') AS ends,
                     {scaled_sum()} AS stated, {outside_pairs()} AS outside,
                     sumIf({ms}, {unstated}) - countIf({unstated}) * min({ms}) AS unstated_ms
              FROM ({base_sql(query)})
              WHERE {sessions}
              GROUP BY skey)"""


def rollup_session_metrics_sql(query: Query, having: str = "1", keys: str = "1") -> str:
    """:func:`session_metrics_sql`'s row from sessions_quarter (schema 012): each session's rows
    in the window merged, kept when ``having`` (aggregates of its rows, e.g. the session
    filters on its value hashes) holds and its ``session_key`` passes ``keys``. The first event's
    time is the high bits of ``source_first``, which every event sets; a stated duration is the
    high bits of an ``ends_stated`` element, a double split into its decimal parts here."""
    first_ms = "toInt128(bitShiftRight(min(source_first), 84))"
    stated = "arrayMap(x -> reinterpretAsFloat64(toUInt64(bitShiftRight(x, 64))), s)"
    unstated_ms = "toInt128(arraySum(x -> toInt64(bitShiftRight(x, 64)), u))"
    return f"""
        SELECT countIf(sessioned = 1), countIf(sessioned = 1 AND pv >= 1),
               countIf(sessioned = 1 AND pv = 1), sum(ends),
               {parts_of_doubles("stated")}, sum(unstated)
        FROM (SELECT sessioned, sum(pageviews) AS pv,
                     arrayDistinct(groupArrayArray(ends_unstated)) AS u,
                     arrayDistinct(groupArrayArray(ends_stated)) AS s,
                     length(u) + length(s) AS ends, {stated} AS stated,
                     {unstated_ms} - toInt128(length(u)) * {first_ms} AS unstated
              FROM {{db}}.sessions_quarter WHERE {QUARTERS}{bots(query)} AND {keys}
              GROUP BY session_key, sessioned HAVING {having})"""


def daily_session_metrics_sql(query: Query, keys: str, events: str) -> str:
    """:func:`session_metrics_sql`'s row under event filters only (``events``, a condition on
    an event's columns) for the sessions whose ``session_key`` is among ``keys`` (a subquery:
    the kept events' keys), from ``session_days``: each session's rows of the window's whole
    UTC days, and the raw events of a partial first or last UTC day (query/decider.py), merged by
    ``session_hash`` (``session_key`` of an event with a session id). An event without one is a
    session of its own, kept when it passes ``events``; only its session_end counts, read from
    the raw window (``name`` first: few rows; a PREWHERE of its own, which the engine did not
    choose once the durations were read, 90 ms on a 10M-event tenant). A session's days are
    fewer and narrower rows than its 15-minute buckets, and only the kept sessions' are
    grouped: the same numbers as :func:`rollup_session_metrics_sql`, faster under a filter that
    keeps millions of events."""
    plan = decide(query)
    b = bots(query)
    unstated = "name = 'session_end' AND duration_ms IS NULL"
    # The whole days' rows of the kept sessions (``kept`` 1), and every sessioned event of the
    # raw edges, ``kept`` when it passes the filters itself: a session is kept when one of its
    # rows is (a kept session's days all pass the semi-join, whichever event kept it). The set
    # of keys is built once, for the day rows; in the edge's too it would be built again.
    rows = (
        "SELECT session_hash, pageviews AS pv, first_at, ends, ends_stated, stated_scaled AS st, "
        f"stated_outside AS so, unstated_at_ms, 1 AS kept FROM {{db}}.session_days "
        f"WHERE {DAY_RANGE}{b} AND session_hash != 0 AND session_hash IN ({keys})"
    )
    if plan.uses_raw_edge:
        rows += f"""
            UNION ALL
            SELECT session_key AS session_hash, toUInt64(name = 'pageview') AS pv,
                   occurred_at AS first_at, toUInt64(name = 'session_end') AS ends,
                   toUInt64({STATED}) AS ends_stated, {scaled_value()} AS st,
                   {outside_value()} AS so,
                   if({unstated}, toUnixTimestamp64Milli(occurred_at), 0) AS unstated_at_ms,
                   toUInt8({events}) AS kept
            FROM {{db}}.events WHERE {EDGE}{b} AND session_id != ''"""
    return f"""
        SELECT s.n, s.with_pv, s.bounced, s.ends + o.ends,
               arrayConcat({scaled_pairs("s.st", "s.so")}, o.stated), s.unstated
        FROM (SELECT count() AS n, countIf(pv >= 1) AS with_pv, countIf(pv = 1) AS bounced,
                     sum(e) AS ends, sum(st) AS st, groupArrayArray(so) AS so,
                     sum(un) AS unstated
              FROM (SELECT sum(pv) AS pv, sum(ends) AS e, sum(st) AS st,
                           groupArrayArray(so) AS so,
                           toInt128(sum(unstated_at_ms))
                           - toInt128(sum(ends) - sum(ends_stated))
                             * toInt128(toUnixTimestamp64Milli(min(first_at))) AS un
                    FROM ({rows}) GROUP BY session_hash HAVING max(kept) = 1)) AS s
        CROSS JOIN (SELECT count() AS ends,
                           {stated_parts("duration_ms IS NOT NULL")} AS stated
                    FROM {{db}}.events
                    PREWHERE name = 'session_end' AND session_id = ''
                    WHERE {RANGE}{b} AND {events}) AS o"""


def kept_sql(query: Query, rollup: bool = True) -> str:
    """The kept events (all columns and ``skey``). ``rollup``: session filters find their
    sessions in sessions_quarter (else by grouping the raw events: the same sessions)."""
    session, events = kept_conditions(query, rollup)
    return f"SELECT * FROM ({base_sql(query)}) WHERE {session} AND {events}"


def dashboard_sql(query: Query, rollup: bool = True) -> dict[str, str]:
    """Every dashboard query of the raw path by name; independent, may run concurrently."""
    kept = f"({kept_sql(query, rollup)})"
    out: dict[str, str] = {}
    out["days"] = f"""
        SELECT toDate32({LOCAL}) AS d, count(), countIf(name = 'pageview'),
               uniqExactIf(visitor_hash, visitor_hash != 0)
        FROM {kept} GROUP BY d"""
    out["hours"] = f"SELECT toHour({LOCAL}) AS h, count() FROM {kept} GROUP BY h"
    out["names"] = f"""
        SELECT name, count() AS c FROM {kept}
        GROUP BY name ORDER BY c DESC, name ASC LIMIT {LIST_LIMIT}"""
    for name, column in (("paths", "path"), ("referrers", "referrer")):
        out[name] = f"""
            SELECT {column} AS k, count() AS c FROM {kept}
            WHERE name = 'pageview' AND {column} != ''
            GROUP BY k ORDER BY c DESC, k ASC LIMIT {LIST_LIMIT}"""
    for name, column in (("browsers", "browser"), ("devices", "device_type")):
        out[name] = f"""
            SELECT toString({column}) AS k, count() AS c FROM {kept}
            GROUP BY k ORDER BY c DESC, k ASC LIMIT {LIST_LIMIT}"""
    out["visitors"] = f"SELECT uniqExactIf(visitor_hash, visitor_hash != 0) FROM {kept}"
    # Session metrics: every event in the window of the sessions with a kept event.
    out["sessions"] = session_metrics_sql(query, f"skey IN (SELECT skey FROM {kept})")
    out["recent"] = f"""
        SELECT toString(event_id), name, path, visitor_id, occurred_at FROM {kept}
        ORDER BY occurred_at DESC LIMIT {RECENT_LIMIT}"""
    out["live"] = live_sql(query.exclude_bots)
    if query.exclude_bots:
        # The window's bot events (not filtered, as summary.botEvents always is): events_quarter
        # holds them per 15 minutes, and a window is on that grid (query/decider.py).
        out["bots"] = (
            f"SELECT sum(events) FROM {{db}}.events_quarter WHERE {QUARTERS} AND is_bot = 1"
        )
    return out


def latest_kept_sql(query: Query, candidates: int = RECENT_CANDIDATES) -> str | None:
    """The latest events under session filters, read from the ``candidates`` latest events of
    the window that pass the event filters rather than from every kept event: only those
    events' sessions are looked up in sessions_quarter (their rows in the window merged and
    matched as :func:`kept_conditions` does), not every session of the window. The kept events
    are a subset of the candidates' kind, so when this returns ``RECENT_LIMIT`` rows they are
    the latest kept events of the window; fewer, and the caller reads ``recent`` in full.
    None without session filters (``recent`` is already a narrow read then)."""
    if not session_filters(query.filters):
        return None
    _, events = kept_conditions(query)
    latest = (
        f"SELECT * FROM ({base_sql(query)}) WHERE {events} "
        f"ORDER BY occurred_at DESC LIMIT {int(candidates)}"
    )
    return f"""
        SELECT toString(event_id), name, path, visitor_id, occurred_at FROM ({latest})
        WHERE skey IN (SELECT session_key FROM {{db}}.sessions_quarter
                       WHERE {QUARTERS}{bots(query)}
                         AND session_key IN (SELECT skey FROM ({latest}))
                       GROUP BY session_key, sessioned HAVING {session_filters_having(query)})
        ORDER BY occurred_at DESC LIMIT {RECENT_LIMIT}"""


def breakdown_sql(query: Query, rollup: bool = True) -> str:
    """(value, visitors, pageviews, events) rows of ``query.dimension`` over the kept events.
    ``rollup``: session values from sessions_quarter (else grouped from the raw events)."""
    dim = DIMENSIONS[query.dimension or ""]
    kept = f"({kept_sql(query, rollup)})"
    counts = (
        "uniqExactIf(visitor_hash, visitor_hash != 0) AS visitors, "
        "countIf(name = 'pageview') AS pageviews, count() AS events"
    )
    if not dim.is_session:
        return f"""
            SELECT toString({dim.column}) AS value, {counts}
            FROM {kept} WHERE value != ''
            GROUP BY value {BREAKDOWN_ORDER}"""
    if rollup:
        # The kept events counted per session first (their visitors as a set), then each
        # session under its value hash (schema 012), named for the rows returned
        # (query/firsts.py). Joining the sessions to the kept sessions rather than to each kept
        # event is a third faster under a filter that keeps millions of events.
        sessions = sessions_sql(query, f"{hash_of(dim.name)} AS h")
        per_session = f"""
            SELECT skey, groupUniqArrayIf(visitor_hash, visitor_hash != 0) AS vs,
                   countIf(name = 'pageview') AS pv, count() AS n
            FROM {kept} GROUP BY skey"""
        rows = f"""
            SELECT h, uniqExactArray(vs) AS visitors, sum(pv) AS pageviews, sum(n) AS events
            FROM ({sessions}) AS s INNER JOIN ({per_session}) AS k ON k.skey = s.skey
            WHERE h NOT IN {NO_VALUE} GROUP BY h"""
        return named_rows(rows, dim.name)
    value = {"value": (dim.column, dim.session_value or "first_event")}
    return f"""
        SELECT value, {counts}
        FROM {kept} AS k
        INNER JOIN ({_sessions(query, value)}) AS s ON k.skey = s.skey
        WHERE value != ''
        GROUP BY value {BREAKDOWN_ORDER}"""


def parameters(query: Query) -> dict[str, Any]:
    plan = decide(query)
    params: dict[str, Any] = {
        "p": query.project_id,
        "t0": query.start,
        "t1": query.end,
        "q0": query.start,
        "q1": query.end,
        "tz": query.tz,
        **live_parameters(query.now),
        "limit": query.limit,
        "d0": plan.first_utc_day,
        "d1": plan.day_after_last,
    }
    if plan.uses_raw_edge:
        params["e0"], params["e1"], params["e2"], params["e3"] = plan.edges()
    for i, flt in enumerate(query.filters):
        params[f"f{i}"] = list(flt.values)
    return params

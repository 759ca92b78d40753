"""The filtered dashboard in few reads of the raw window (issue 17).

``filtered.dashboard_sql`` asks about ten questions of the kept events, each reading the window
of raw events (and, under session filters, finding the matching sessions in sessions_quarter)
again. Here the same answers come from three queries:

- *facts*: one pass over the kept events, grouped by ``GROUPING SETS`` into the local day, the
  local hour, the event name, the pageviews' path and referrer, browser, device type and the
  whole window; each row carries events and pageviews, and the days and the window their
  distinct visitors, counted from a set keyed by day and visitor. The top lists are cut to
  ``LIST_LIMIT`` in SQL by the same order as before.
- *sessions*: the session metrics of the sessions with a kept event, each session's rows
  merged: of ``sessions_quarter`` (schema 012 keeps its session_end events there) kept by the
  session filters on its value hashes; under event filters only, of ``session_days`` (and
  the raw edges) by a semi-join on the kept events' session keys; under both, of
  ``sessions_quarter`` by that semi-join. ``rollup=False`` groups the window's raw events by
  session instead (the per-part path's query; the tests compare both).
- *recent*, *live* and *bots* as before. Under session filters the runner first looks for the
  latest kept events among the window's latest events (``filtered.latest_kept_sql``).

:func:`split` turns the facts rows into the rows ``filtered.dashboard_sql``'s queries return, so
that the runner and the tests (which compare both ways over the same data) see one shape."""

from __future__ import annotations

from typing import Any

from ..domain.metrics import LIST_LIMIT
from . import audience
from .filtered import (
    LOCAL,
    QUARTERS,
    base_sql,
    daily_session_metrics_sql,
    dashboard_sql,
    kept_conditions,
    rollup_session_metrics_sql,
    session_filters_having,
    session_metrics_sql,
)
from .firsts import candidate_keys
from .model import Query

# The grouping sets of *facts*, in ``grouping()``'s argument order.
KEYS = ("d", "h", "name", "pth", "ref", "br", "dev")
_ALL = (1 << len(KEYS)) - 1


def _set(column: str) -> int:
    """``grouping(KEYS...)`` of the rows of the set keyed by ``column`` alone (a bit is 1 for
    each column aggregated over, the first argument's the highest)."""
    return _ALL - (1 << (len(KEYS) - 1 - KEYS.index(column)))


DAYS, HOURS, NAMES = _set("d"), _set("h"), _set("name")
PATHS, REFERRERS, BROWSERS, DEVICES = _set("pth"), _set("ref"), _set("br"), _set("dev")
WINDOW = _ALL
# The top lists and the string key each is ordered by (count desc, key asc), as before.
LISTS = {NAMES: "name", PATHS: "pth", REFERRERS: "ref", BROWSERS: "br", DEVICES: "dev"}


# Each key's expression over the kept events.
_EXPRESSIONS = {
    "d": f"toDate32({LOCAL})",
    "h": f"toHour({LOCAL})",
    "name": "name",
    "pth": "if(name = 'pageview', path, '')",
    "ref": "if(name = 'pageview', referrer, '')",
    "br": "toString(browser)",
    "dev": "toString(device_type)",
}


def _codes(columns: tuple[str, ...], of: tuple[str, ...]) -> int:
    """``grouping(*of)`` of the rows of the set keyed by ``columns`` (a bit is 1 for each
    column aggregated over, the first argument's the highest)."""
    n = len(of)
    return sum(1 << (n - 1 - i) for i, column in enumerate(of) if column not in columns)


def _counted(kept: str, keys: tuple[str, ...]) -> str:
    """The rows (g, KEYS..., c, pv, v) of the sets keyed by each of ``keys`` alone, counting
    events and pageviews (``v`` 0: a top list counts events only)."""
    own = f"transform(grouping({', '.join(keys)}), {[_codes((k,), keys) for k in keys]}, "
    own += f"{[_set(k) for k in keys]}, 0)"
    columns = ", ".join(k if k in keys else f"'' AS {k}" for k in KEYS)
    return f"""
        SELECT {own} AS g, {columns}, count() AS c, countIf(event_name = 'pageview') AS pv,
               toUInt64(0) AS v
        FROM ({kept}) GROUP BY GROUPING SETS ({", ".join(f"({k})" for k in keys)})"""


def _counted_with_visitors(kept: str) -> str:
    """The rows (g, KEYS..., c, pv, v) of every set of :data:`KEYS` and of the whole window, with
    the distinct visitors of the days and of the window. These are counted from a set keyed by
    day and visitor rather than by a ``uniqExact`` in every set: one hash insert per kept event,
    not one per set (a third faster under a filter that keeps millions of events)."""
    inner = (*KEYS, "vh")
    by_day = _codes(("d", "vh"), inner)
    others = [k for k in KEYS if k != "d"]
    own = f"transform(g1, {[_codes((k,), inner) for k in others]}, {[_set(k) for k in others]}, 0)"
    keys = ", ".join(KEYS)
    return f"""
        SELECT multiIf(g1 = {by_day}, if(grouping(g1, {keys}) = 0, {DAYS}, {WINDOW}), {own}) AS g,
               {keys}, sum(c1) AS c, sum(pv1) AS pv, uniqExactIf(vh, vh != 0) AS v
        FROM (SELECT grouping({", ".join(inner)}) AS g1, {keys}, vh,
                     count() AS c1, countIf(event_name = 'pageview') AS pv1
              FROM ({kept})
              GROUP BY GROUPING SETS ((d, vh), {", ".join(f"({k})" for k in others)}))
        GROUP BY GROUPING SETS ((g1, {keys}), (g1))
        HAVING grouping(g1, {keys}) = 0 OR g1 = {by_day}"""


def facts_sql(query: Query, rollup: bool = True, keys: tuple[str, ...] = KEYS) -> str:
    """The facts rows (g, d, h, name, pth, ref, br, dev, c, pv, v) of the grouping sets keyed by
    each of ``keys`` alone, and of the whole window when ``keys`` are all of :data:`KEYS`
    (else ``v``, the distinct visitors, is 0: a top list counts events only)."""
    session, events = kept_conditions(query, rollup)
    columns = ", ".join(f"{_EXPRESSIONS[k]} AS {k}" for k in keys)
    kept = (
        f"SELECT {columns}, name AS event_name, visitor_hash AS vh "
        f"FROM ({base_sql(query)}) WHERE {session} AND {events}"
    )
    counted = _counted_with_visitors(kept) if keys == KEYS else _counted(kept, keys)
    key = "multiIf(" + ", ".join(f"g = {g}, {c}" for g, c in LISTS.items()) + ", '')"
    return f"""
        SELECT g, {", ".join(KEYS)}, c, pv, v FROM (
            SELECT g, {", ".join(KEYS)}, c, pv, v,
                   row_number() OVER (PARTITION BY g ORDER BY c DESC, {key} ASC) AS rank
            FROM ({counted}))
        WHERE g IN ({DAYS}, {HOURS}, {WINDOW})
           OR (g IN ({PATHS}, {REFERRERS}) AND {key} != '' AND rank <= {LIST_LIMIT + 1})
           OR (g NOT IN ({PATHS}, {REFERRERS}) AND rank <= {LIST_LIMIT})"""


def sessions_sql(query: Query, rollup: bool = True) -> str:
    """(sessions, with a pageview, bounced, session_end events, total duration ms) of the
    sessions with a kept event, every event of theirs in the window."""
    session, events = kept_conditions(query, rollup)
    kept_keys = f"SELECT skey FROM ({base_sql(query)}) WHERE {session} AND {events}"
    if rollup:
        # Each session's rows merged: under session filters only, its rows of sessions_quarter
        # (schema 012) kept by the filters on its merged values; under event filters only, its
        # days of session_days when it has a kept event (a semi-join on the kept events'
        # keys); under both, its rows of sessions_quarter by that semi-join.
        if events == "1":
            having = session_filters_having(query)
            return rollup_session_metrics_sql(query, having, keys=candidate_keys(query, QUARTERS))
        if session == "1":  # event filters only: the kept sessions' days (session_days)
            return daily_session_metrics_sql(query, kept_keys, events)
        return rollup_session_metrics_sql(query, keys=f"session_key IN ({kept_keys})")
    # Under event filters, only the sessions with a kept event are grouped (a semi-join on the
    # kept events' keys): grouping every session of the window and keeping those with a kept
    # event gives the same rows, measured slower.
    restrict = "" if events == "1" else f" AND skey IN ({kept_keys})"
    return session_metrics_sql(query, session + restrict)


# audience_quarter's grouping sets, as facts codes (query/audience.py).
AUDIENCE_CODES = {"d": DAYS, "h": HOURS, "br": BROWSERS, "dev": DEVICES, "": WINDOW}


def onescan_sql(query: Query, rollup: bool = True) -> dict[str, str]:
    """The filtered dashboard's queries by name: ``facts`` (see :func:`split`), ``sessions``,
    and ``recent``, ``live``, ``bots`` as in ``filtered.dashboard_sql``. Under filters on
    country, browser, os or device type only, ``facts_audience`` reads the timeline, heatmap,
    visitors, browsers and devices from ``audience_quarter`` and ``facts`` the raw events for
    the event names, paths and referrers alone: the runner splits the two sets of rows as one."""
    old = dashboard_sql(query, rollup)
    if audience.answers(query):
        out = {
            "facts": facts_sql(query, rollup, keys=("name", "pth", "ref")),
            "facts_audience": audience.facts_sql(query, AUDIENCE_CODES),
        }
    else:
        out = {"facts": facts_sql(query, rollup)}
    out["sessions"] = sessions_sql(query, rollup)
    out.update({name: old[name] for name in ("recent", "live", "bots") if name in old})
    return out


Rows = list[tuple[Any, ...]]


def split(facts: Rows) -> dict[str, Rows]:
    """The facts rows as ``filtered.dashboard_sql``'s queries give them: ``days`` (day, events,
    pageviews, visitors), ``hours``, ``names``, ``paths``, ``referrers``, ``browsers``,
    ``devices`` ((key, count), count desc then key asc, at most LIST_LIMIT) and ``visitors``."""
    by: dict[int, Rows] = {}
    for row in facts:
        by.setdefault(int(row[0]), []).append(row)
    out: dict[str, Rows] = {
        "days": [(r[1], r[8], r[9], r[10]) for r in by.get(DAYS, [])],
        "hours": [(r[2], r[8]) for r in by.get(HOURS, [])],
        "visitors": [(r[10],) for r in by.get(WINDOW, [])] or [(0,)],
    }
    for name, g in (
        ("names", NAMES),
        ("paths", PATHS),
        ("referrers", REFERRERS),
        ("browsers", BROWSERS),
        ("devices", DEVICES),
    ):
        column = 1 + KEYS.index(LISTS[g])
        rows = sorted(((r[column], r[8]) for r in by.get(g, [])), key=lambda x: (-x[1], x[0]))
        out[name] = [row for row in rows if name not in ("paths", "referrers") or row[0]][
            :LIST_LIMIT
        ]
    return out

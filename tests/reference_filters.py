"""A plain-Python model of issue 17's filtered numbers, written from the issue text and the
README section "Filters, ranges and comparison", independent of Tally's code (it imports nothing
from ``tally``). Tests compare what the service answers with what this computes from the events
the test sent.

The rules it models:

- The range: local days ``first_day``..``last_day`` of ``zone``, from local midnight of the first
  to local midnight after the last (DST-correct, as ``zoneinfo`` says), and no later than ``now``
  when given. Bot events (``is_bot``) are left out of every number when ``exclude_bots``;
  ``botEvents`` counts them in the range, unfiltered.
- A session is the events in the range with one non-empty ``session_id``; an event without one
  is a session of its own ("stands for itself").
- A session's value of a session dimension: the value of its first event in the range for
  ``source``, ``channel`` and ``utm*``; the path of its first pageview in the range for
  ``entryPage`` and of its last pageview for ``exitPage`` (``""`` without a pageview). Ties in
  time are broken by the order of the list (tests avoid them: SQL has no order among equals).
- Filters: ``is`` / ``is_not``: the value is (is not) one of the values, exactly.
  ``contains`` / ``contains_not``: one of the values is (none is) a substring, ignoring case
  (``str.lower`` on both sides). Values of one filter OR, filters AND.
- Session filters keep the sessions whose value matches, with all their events. Event filters
  then keep the events (of those sessions) that match. The *kept events* give every event
  number: totalEvents, pageviews, uniqueVisitors, uniqueSessions, timeline, heatmap, top lists,
  recentEvents, breakdown rows.
- Session metrics are over the *kept sessions*, the sessions with at least one kept event, and
  use all of those sessions' events in the range, matching or not (as Plausible computes visit
  metrics for the sessions that have a matching event):
  ``bounceRate``: among kept sessions with a non-empty id and at least one pageview in the range,
  the percentage with exactly one pageview (2 decimals, half up).
  ``avgSessionDurationMs``: the mean over the ``session_end`` events of kept sessions of their
  duration (``duration_ms`` when given, else the time from the session's first event in the range;
  0 for a ``session_end`` without a session id), an integer, half up.
- ``liveVisitors`` is not filtered (it is "now", not the range).
- Breakdown rows: kept events grouped by the event's own value (event dimensions) or its
  session's value (session dimensions); rows with the value ``""`` are left out; visitors,
  pageviews, events; by visitors, then pageviews, descending, then value ascending (UTF-8 bytes).
- Comparison: the same numbers over the other range; ``change`` = (now - before) / before in
  percent, 1 decimal half up, ``None`` when before is 0.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import ROUND_HALF_UP, Decimal, localcontext
from typing import Any
from zoneinfo import ZoneInfo

from reference import LARGEST, WIDE, mean_ms

SESSION_DIMENSIONS = {
    "source": "source",
    "channel": "channel",
    "utmSource": "utm_source",
    "utmMedium": "utm_medium",
    "utmCampaign": "utm_campaign",
    "utmContent": "utm_content",
    "utmTerm": "utm_term",
    "entryPage": "path",
    "exitPage": "path",
}
EVENT_DIMENSIONS = {
    "path": "path",
    "event": "name",
    "country": "country",
    "browser": "browser",
    "os": "os",
    "deviceType": "device_type",
    "referrer": "referrer",
}
ALL_DIMENSIONS = {**EVENT_DIMENSIONS, **SESSION_DIMENSIONS}


@dataclass
class Ev:
    """An event as stored (dimension columns already computed at ingestion)."""

    name: str
    occurred_at: datetime  # UTC
    path: str = ""
    referrer: str = ""
    session_id: str = ""
    visitor_id: str = ""
    browser: str = "Unknown"
    os: str = "Unknown"
    device_type: str = "Unknown"
    country: str = ""
    source: str = ""
    channel: str = ""
    utm_source: str = ""
    utm_medium: str = ""
    utm_campaign: str = ""
    utm_content: str = ""
    utm_term: str = ""
    is_bot: bool = False
    duration_ms: float | None = None  # metadata.durationMs when a number >= 0


Flt = tuple[str, str, Sequence[str]]  # (operator, dimension, values), as the API spells it


def half_up(value: Decimal, places: int) -> Decimal:
    with localcontext(WIDE):
        return value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


def bounds(zone: ZoneInfo, first_day: date, last_day: date) -> tuple[datetime, datetime]:
    """UTC instants of local midnight of first_day and of the day after last_day."""
    start = datetime.combine(first_day, time(0), tzinfo=zone).astimezone(UTC)
    after = last_day + timedelta(days=1)
    return start, datetime.combine(after, time(0), tzinfo=zone).astimezone(UTC)


def matches(operator: str, value: str, values: Iterable[str]) -> bool:
    if operator in ("is", "is_not"):
        hit = value in values
    else:
        hit = any(v.lower() in value.lower() for v in values)
    return hit if operator in ("is", "contains") else not hit


@dataclass
class Selection:
    """What a filtered query reads: the kept events, the kept sessions, and every event of the
    range (for session metrics) grouped by session."""

    kept: list[Ev]
    sessions: dict[Any, list[Ev]]  # every session of the range, events in time order
    kept_sessions: list[Any]  # keys of sessions with a kept event, in first-seen order
    session_of: dict[int, Any]  # id(event) -> session key
    bots: int


def _session_value(dimension: str, events: list[Ev]) -> str:
    if dimension == "entryPage":
        pages = [e.path for e in events if e.name == "pageview"]
        return pages[0] if pages else ""
    if dimension == "exitPage":
        pages = [e.path for e in events if e.name == "pageview"]
        return pages[-1] if pages else ""
    return getattr(events[0], SESSION_DIMENSIONS[dimension])


def value_of(dimension: str, event: Ev, selection: Selection) -> str:
    if dimension in SESSION_DIMENSIONS:
        return _session_value(dimension, selection.sessions[selection.session_of[id(event)]])
    return getattr(event, EVENT_DIMENSIONS[dimension])


def select(
    events: Sequence[Ev],
    filters: Sequence[Flt],
    *,
    zone: ZoneInfo,
    first_day: date,
    last_day: date,
    now: datetime | None = None,
    exclude_bots: bool = True,
) -> Selection:
    start, end = bounds(zone, first_day, last_day)
    in_range = [
        e for e in events if start <= e.occurred_at < end and (now is None or e.occurred_at <= now)
    ]
    bots = sum(1 for e in in_range if e.is_bot) if exclude_bots else 0
    inside = [e for e in in_range if not (exclude_bots and e.is_bot)]
    order = sorted(range(len(inside)), key=lambda i: (inside[i].occurred_at, i))
    sessions: dict[Any, list[Ev]] = defaultdict(list)
    session_of: dict[int, Any] = {}
    for i in order:
        e = inside[i]
        key = ("s", e.session_id) if e.session_id else ("e", i)
        sessions[key].append(e)
        session_of[id(e)] = key
    session_filters = [f for f in filters if f[1] in SESSION_DIMENSIONS]
    event_filters = [f for f in filters if f[1] in EVENT_DIMENSIONS]
    passing = {
        key
        for key, evs in sessions.items()
        if all(matches(op, _session_value(dim, evs), vals) for op, dim, vals in session_filters)
    }
    kept = [
        e
        for e in (inside[i] for i in order)
        if session_of[id(e)] in passing
        and all(
            matches(op, getattr(e, EVENT_DIMENSIONS[dim]), vals) for op, dim, vals in event_filters
        )
    ]
    kept_sessions = list(dict.fromkeys(session_of[id(e)] for e in kept))
    return Selection(kept, dict(sessions), kept_sessions, session_of, bots)


def bounce_rate(selection: Selection) -> float:
    with_pageviews = bounced = 0
    for key in selection.kept_sessions:
        if key[0] != "s":
            continue  # no session id: not a session of the bounce rate
        n = sum(1 for e in selection.sessions[key] if e.name == "pageview")
        if n >= 1:
            with_pageviews += 1
            bounced += n == 1
    if not with_pageviews:
        return 0.0
    return float(half_up(Decimal(100 * bounced) / Decimal(with_pageviews), 2))


def avg_duration_ms(selection: Selection) -> int:
    durations: list[Decimal] = []
    for key in selection.kept_sessions:
        evs = selection.sessions[key]
        for e in evs:
            if e.name != "session_end":
                continue
            if e.duration_ms is not None:
                durations.append(Decimal(str(float(e.duration_ms))))
            elif key[0] == "s":
                durations.append(
                    Decimal((e.occurred_at - evs[0].occurred_at) // timedelta(milliseconds=1))
                )
            else:
                durations.append(Decimal(0))
    return mean_ms(durations)


def summary(selection: Selection) -> dict[str, Any]:
    kept = selection.kept
    return {
        "totalEvents": len(kept),
        "pageviews": sum(1 for e in kept if e.name == "pageview"),
        "uniqueVisitors": len({e.visitor_id for e in kept if e.visitor_id}),
        "uniqueSessions": len({e.session_id for e in kept if e.session_id}),
        "avgSessionDurationMs": avg_duration_ms(selection),
        "bounceRate": bounce_rate(selection),
        "botEvents": selection.bots,
    }


def timeline(selection: Selection, zone: ZoneInfo, first_day: date, last_day: date) -> list[dict]:
    by_day: dict[date, list[Ev]] = defaultdict(list)
    for e in selection.kept:
        by_day[e.occurred_at.astimezone(zone).date()].append(e)
    rows = []
    day = first_day
    while day <= last_day:
        evs = by_day.get(day, [])
        rows.append(
            {
                "day": day.isoformat(),
                "events": len(evs),
                "pageviews": sum(1 for e in evs if e.name == "pageview"),
                "visitors": len({e.visitor_id for e in evs if e.visitor_id}),
            }
        )
        day += timedelta(days=1)
    return rows


def _top(counter: Counter[str], key: str, value: str) -> list[dict[str, Any]]:
    rows = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0].encode("utf-8")))
    return [{key: k, value: v} for k, v in rows[:10]]


def dashboard(
    events: Sequence[Ev],
    filters: Sequence[Flt] = (),
    *,
    zone: ZoneInfo,
    first_day: date,
    last_day: date,
    now: datetime,
    exclude_bots: bool = True,
) -> dict[str, Any]:
    """Every dashboard number under ``filters`` for the local days first_day..last_day."""
    sel = select(
        events,
        filters,
        zone=zone,
        first_day=first_day,
        last_day=last_day,
        now=now,
        exclude_bots=exclude_bots,
    )
    kept = sel.kept
    pageviews = [e for e in kept if e.name == "pageview"]
    hours = Counter(e.occurred_at.astimezone(zone).hour for e in kept)
    recent = sorted(kept, key=lambda e: e.occurred_at, reverse=True)[:20]
    live_since = now - timedelta(minutes=5)
    return {
        "summary": summary(sel),
        "timeline": timeline(sel, zone, first_day, last_day),
        "topPaths": _top(Counter(e.path for e in pageviews if e.path), "path", "views"),
        "topReferrers": _top(
            Counter(e.referrer for e in pageviews if e.referrer), "referrer", "count"
        ),
        "browserBreakdown": _top(Counter(e.browser for e in kept), "browser", "count"),
        "deviceBreakdown": _top(Counter(e.device_type for e in kept), "deviceType", "count"),
        "eventBreakdown": _top(Counter(e.name for e in kept), "name", "count"),
        "hourlyHeatmap": [{"hour": h, "count": hours.get(h, 0)} for h in range(24)],
        "recentEvents": [(e.name, e.path, e.visitor_id, e.occurred_at) for e in recent],
        "liveVisitors": len(
            {
                e.visitor_id
                for e in events
                if e.visitor_id
                and live_since <= e.occurred_at <= now
                and not (exclude_bots and e.is_bot)
            }
        ),
    }


def breakdown(
    events: Sequence[Ev],
    by: str,
    filters: Sequence[Flt] = (),
    *,
    zone: ZoneInfo,
    first_day: date,
    last_day: date,
    now: datetime | None = None,
    limit: int = 10,
    exclude_bots: bool = True,
) -> list[dict[str, Any]]:
    """Rows ``{value, visitors, pageviews, events}`` of ``by`` under ``filters``."""
    sel = select(
        events,
        filters,
        zone=zone,
        first_day=first_day,
        last_day=last_day,
        now=now,
        exclude_bots=exclude_bots,
    )
    groups: dict[str, list[Ev]] = defaultdict(list)
    for e in sel.kept:
        value = value_of(by, e, sel)
        if value:
            groups[value].append(e)
    rows = [
        {
            "value": value,
            "visitors": len({e.visitor_id for e in evs if e.visitor_id}),
            "pageviews": sum(1 for e in evs if e.name == "pageview"),
            "events": len(evs),
        }
        for value, evs in groups.items()
    ]
    rows.sort(key=lambda r: (-r["visitors"], -r["pageviews"], r["value"].encode("utf-8")))
    return rows[:limit]


def change(now: float, before: float) -> float | None:
    if before == 0:
        return None
    with localcontext(WIDE):
        value = (Decimal(str(now)) - Decimal(str(before))) * 100 / Decimal(str(before))
        return float(half_up(max(-LARGEST, min(value, LARGEST)), 1))


def compared(current: dict[str, Any], previous: dict[str, Any]) -> dict[str, float | None]:
    """``change`` of each numeric field of two summaries (or breakdown rows)."""
    return {
        k: change(current[k], previous[k])
        for k in current
        if isinstance(current[k], int | float) and not isinstance(current[k], bool)
    }


def previous_period(first_day: date, last_day: date) -> tuple[date, date]:
    n = (last_day - first_day).days + 1
    return first_day - timedelta(days=n), first_day - timedelta(days=1)


def previous_year(first_day: date, last_day: date) -> tuple[date, date]:
    def back(d: date) -> date:
        if d.month == 2 and d.day == 29:
            return date(d.year - 1, 2, 28)
        return date(d.year - 1, d.month, d.day)

    return back(first_day), back(last_day)


def v2_rows(
    events: Sequence[Ev],
    metrics: Sequence[str],
    dimensions: Sequence[str],
    filters: Sequence[Flt] = (),
    *,
    zone: ZoneInfo,
    first_day: date,
    last_day: date,
    exclude_bots: bool = True,
) -> dict[tuple[str, ...], list[Any]]:
    """The v2 query API's results as {dimension values: metric values}, unordered.

    A group's session metrics are over the kept sessions with a kept event in the group (all
    their events in the range); ``visit_duration`` in ms; rows whose Tally dimension value is
    ``""`` are left out, as in breakdowns. Without dimensions there is always one row.
    """
    sel = select(
        events,
        filters,
        zone=zone,
        first_day=first_day,
        last_day=last_day,
        exclude_bots=exclude_bots,
    )
    groups: dict[tuple[str, ...], list[Ev]] = defaultdict(list)
    for e in sel.kept:
        key = []
        for dim in dimensions:
            local = e.occurred_at.astimezone(zone)
            if dim == "time:day":
                key.append(local.date().isoformat())
            elif dim == "time:hour":
                key.append(local.strftime("%Y-%m-%d %H:00:00"))
            else:
                key.append(value_of(dim, e, sel))
        if all(key):
            groups[tuple(key)].append(e)
    out = {}
    for key, evs in groups.items():
        sub = Selection(
            evs,
            sel.sessions,
            list(dict.fromkeys(sel.session_of[id(e)] for e in evs)),
            sel.session_of,
            0,
        )
        s = summary(sub)
        values = {
            "visitors": s["uniqueVisitors"],
            "visits": s["uniqueSessions"],
            "pageviews": s["pageviews"],
            "events": s["totalEvents"],
            "bounce_rate": s["bounceRate"],
            "visit_duration": s["avgSessionDurationMs"],
        }
        out[key] = [values[m] for m in metrics]
    if not dimensions and not out:  # an aggregate is one row, zeros when nothing is kept
        out[()] = [0.0 if m == "bounce_rate" else 0 for m in metrics]
    return out


def with_comparison(
    events: Sequence[Ev],
    filters: Sequence[Flt] = (),
    *,
    compare: str,
    zone: ZoneInfo,
    first_day: date,
    last_day: date,
    now: datetime,
) -> dict[str, Any]:
    """The dashboard of the range plus ``comparison: {from, to, summary, timeline, change}``."""
    board = dashboard(events, filters, zone=zone, first_day=first_day, last_day=last_day, now=now)
    if compare == "previous_period":
        first, last = previous_period(first_day, last_day)
    else:
        first, last = previous_year(first_day, last_day)
    sel = select(events, filters, zone=zone, first_day=first, last_day=last)
    before = summary(sel)
    board["comparison"] = {
        "from": first.isoformat(),
        "to": last.isoformat(),
        "summary": before,
        "timeline": timeline(sel, zone, first, last),
        "change": compared(board["summary"], before),
    }
    return board


def breakdown_with_comparison(
    events: Sequence[Ev],
    by: str,
    filters: Sequence[Flt] = (),
    *,
    compare: str,
    zone: ZoneInfo,
    first_day: date,
    last_day: date,
    now: datetime | None = None,
    limit: int = 10,
) -> list[dict[str, Any]]:
    """Breakdown rows of the range, each with ``comparison``: the same value's metrics in the
    other range (0 when absent there) and their ``change``."""
    rows = breakdown(
        events,
        by,
        filters,
        zone=zone,
        first_day=first_day,
        last_day=last_day,
        now=now,
        limit=limit,
    )
    if compare == "previous_period":
        first, last = previous_period(first_day, last_day)
    else:
        first, last = previous_year(first_day, last_day)
    earlier = {
        r["value"]: r
        for r in breakdown(
            events, by, filters, zone=zone, first_day=first, last_day=last, limit=10**9
        )
    }
    for row in rows:
        other = earlier.get(row["value"], {"visitors": 0, "pageviews": 0, "events": 0})
        metrics = {k: other[k] for k in ("visitors", "pageviews", "events")}
        row["comparison"] = {
            **metrics,
            "change": compared({k: row[k] for k in metrics}, metrics),
        }
    return rows

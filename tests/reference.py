"""A plain-Python model of the dashboard definitions in CONTRACT.md, written from the contract and
independent of Tally's code: tests compare what the service answers with what this computes from
the events the test sent."""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import ROUND_HALF_UP, Context, Decimal, localcontext
from typing import Any
from zoneinfo import ZoneInfo


@dataclass
class Sent:
    """An event as stored: occurred_at already resolved (UTC, clamped to receipt)."""

    name: str
    occurred_at: datetime
    path: str = ""
    referrer: str = ""
    session_id: str = ""
    visitor_id: str = ""
    browser: str = "Unknown"
    device_type: str = "Unknown"
    metadata: dict[str, Any] = field(default_factory=dict)
    is_bot: bool = False  # set at ingestion from the User-Agent; tests store it directly
    # Set at ingestion from the url, referrer, IP and User-Agent; tests store them directly.
    os: str = "Unknown"
    source: str = ""
    channel: str = ""
    utm_source: str = ""
    utm_medium: str = ""
    utm_campaign: str = ""
    utm_content: str = ""
    utm_term: str = ""
    country: str = ""

    def payload(self) -> dict[str, Any]:
        """The JSON a client sends for this event (browser/device passed through metadata)."""
        body: dict[str, Any] = {
            "name": self.name,
            "occurredAt": self.occurred_at.isoformat().replace("+00:00", "Z"),
        }
        for key, attr in (
            ("path", "path"),
            ("referrer", "referrer"),
            ("sessionId", "session_id"),
            ("visitorId", "visitor_id"),
        ):
            if getattr(self, attr):
                body[key] = getattr(self, attr)
        metadata = dict(self.metadata)
        metadata.setdefault("browser", self.browser)
        metadata.setdefault("deviceType", self.device_type)
        body["metadata"] = metadata
        return body


def _top(counter: Counter[str], key: str, value: str) -> list[dict[str, Any]]:
    rows = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0].encode("utf-8")))
    return [{key: k, value: v} for k, v in rows[:10]]


# Every digit of any double and more (the default 28 digits cannot hold a duration of 1e29 ms).
WIDE = Context(prec=400, rounding=ROUND_HALF_UP)
# A total past the largest double counts as that double (CONTRACT.md leaves it open; the README
# says so).
LARGEST = Decimal(sys.float_info.max)


def _half_up(value: Decimal, places: int) -> Decimal:
    with localcontext(WIDE):
        return value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


def mean_ms(durations: list[Decimal]) -> int:
    """The mean of ``durations`` in whole milliseconds, half up; 0 for none."""
    if not durations:
        return 0
    with localcontext(WIDE):
        return int(_half_up(min(sum(durations, Decimal(0)), LARGEST) / len(durations), 0))


def dashboard(
    events: list[Sent], now: datetime, days: int, tz: str = "UTC", exclude_bots: bool = True
) -> dict[str, Any]:
    """The dashboard of a project in zone ``tz``: the window is the events whose local calendar
    day is one of the ``days`` days ending with today's (and not after ``now``); days and hours
    are local. With ``exclude_bots`` events flagged as bots count nowhere and ``botEvents`` says
    how many of the window's were left out; without it they count like any other."""
    zone = ZoneInfo(tz)

    def local(e: Sent) -> datetime:
        return e.occurred_at.astimezone(zone)

    today = now.astimezone(zone).date()
    first: date = today - timedelta(days=days - 1)
    in_window = [e for e in events if first <= local(e).date() and e.occurred_at <= now]
    inside = [e for e in in_window if not (exclude_bots and e.is_bot)]
    bot_events = len(in_window) - len(inside)

    pageviews = [e for e in inside if e.name == "pageview"]
    timeline = []
    for i in range(days):
        day = first + timedelta(days=i)
        timeline.append(
            {
                "day": day.isoformat(),
                "events": sum(1 for e in inside if local(e).date() == day),
                "pageviews": sum(1 for e in pageviews if local(e).date() == day),
                "visitors": len(
                    {e.visitor_id for e in inside if e.visitor_id and local(e).date() == day}
                ),
            }
        )

    session_pageviews: Counter[str] = Counter()
    for e in inside:
        if e.session_id:
            session_pageviews[e.session_id] += 1 if e.name == "pageview" else 0
    with_pageviews = [s for s, n in session_pageviews.items() if n >= 1]
    bounced = [s for s in with_pageviews if session_pageviews[s] == 1]
    bounce = (
        float(_half_up(Decimal(100 * len(bounced)) / Decimal(len(with_pageviews)), 2))
        if with_pageviews
        else 0.0
    )

    first_seen: dict[str, datetime] = {}
    for e in inside:
        if e.session_id and (
            e.session_id not in first_seen or e.occurred_at < first_seen[e.session_id]
        ):
            first_seen[e.session_id] = e.occurred_at
    durations: list[Decimal] = []
    for e in inside:
        if e.name != "session_end":
            continue
        given = e.metadata.get("durationMs")
        if isinstance(given, int | float) and not isinstance(given, bool) and given >= 0:
            durations.append(Decimal(str(float(given))))
        elif e.session_id:
            delta = e.occurred_at - first_seen[e.session_id]
            durations.append(Decimal(delta // timedelta(milliseconds=1)))
        else:
            durations.append(Decimal(0))
    avg = mean_ms(durations)

    hours: Counter[int] = Counter(local(e).hour for e in inside)
    recent = sorted(inside, key=lambda e: e.occurred_at, reverse=True)[:20]
    return {
        "summary": {
            "totalEvents": len(inside),
            "pageviews": len(pageviews),
            "uniqueVisitors": len({e.visitor_id for e in inside if e.visitor_id}),
            "uniqueSessions": len({e.session_id for e in inside if e.session_id}),
            "avgSessionDurationMs": avg,
            "bounceRate": bounce,
            "botEvents": bot_events,
        },
        "timeline": timeline,
        "topPaths": _top(Counter(e.path for e in pageviews if e.path), "path", "views"),
        "topReferrers": _top(
            Counter(e.referrer for e in pageviews if e.referrer), "referrer", "count"
        ),
        "browserBreakdown": _top(Counter(e.browser for e in inside), "browser", "count"),
        "deviceBreakdown": _top(Counter(e.device_type for e in inside), "deviceType", "count"),
        "eventBreakdown": _top(Counter(e.name for e in inside), "name", "count"),
        "hourlyHeatmap": [{"hour": h, "count": hours.get(h, 0)} for h in range(24)],
        "recentEvents": [
            {
                "name": e.name,
                "path": e.path,
                "visitorId": e.visitor_id,
                "occurredAt": e.occurred_at.strftime("%Y-%m-%dT%H:%M:%S.")
                + f"{e.occurred_at.microsecond // 1000:03d}Z",
            }
            for e in recent
        ],
        "liveVisitors": live_visitors(events, now, exclude_bots),
    }


def live_visitors(events: list[Sent], now: datetime, exclude_bots: bool = True) -> int:
    """Distinct visitors with an event in the 5 minutes before ``now`` (GET /api/live, and the
    dashboard's liveVisitors): filters and the window do not apply."""
    since = now - timedelta(minutes=5)
    return len(
        {
            e.visitor_id
            for e in events
            if e.visitor_id and since <= e.occurred_at <= now and not (exclude_bots and e.is_bot)
        }
    )


# --- /api/breakdown ---------------------------------------------------------------------------
EVENT_DIMENSIONS = {
    "path": "path",
    "referrer": "referrer",
    "country": "country",
    "browser": "browser",
    "os": "os",
    "deviceType": "device_type",
    "event": "name",
}
SESSION_DIMENSIONS = {
    "source": "source",
    "channel": "channel",
    "utmSource": "utm_source",
    "utmMedium": "utm_medium",
    "utmCampaign": "utm_campaign",
    "utmContent": "utm_content",
    "utmTerm": "utm_term",
}


def breakdown(
    events: list[Sent],
    now: datetime,
    days: int,
    by: str,
    limit: int = 10,
    tz: str = "UTC",
    exclude_bots: bool = True,
) -> dict[str, Any]:
    """The window's events (as the dashboard's) by one dimension. Event dimensions are each
    event's own value; session dimensions are the session's: acquisition from its first event
    in the window, entryPage / exitPage the path of its first / last pageview in the window, and
    every event of the session counts under them. An event without a session id is a session of
    its own. Empty values are left out. Rows: distinct non-empty visitor ids, pageviews, events;
    by visitors, then pageviews, descending, then value ascending (byte order)."""
    zone = ZoneInfo(tz)
    today = now.astimezone(zone).date()
    first = today - timedelta(days=days - 1)
    inside = [
        e
        for e in events
        if first <= e.occurred_at.astimezone(zone).date()
        and e.occurred_at <= now
        and not (exclude_bots and e.is_bot)
    ]
    groups: dict[Any, list[Sent]] = {}
    for n, e in enumerate(inside):
        groups.setdefault(e.session_id or ("alone", n), []).append(e)
    visitors: dict[str, set[str]] = {}
    pageviews: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for group in groups.values():
        ordered = sorted(group, key=lambda e: e.occurred_at)
        views = [e for e in ordered if e.name == "pageview"]
        for e in ordered:
            if by in EVENT_DIMENSIONS:
                value = getattr(e, EVENT_DIMENSIONS[by])
            elif by in SESSION_DIMENSIONS:
                value = getattr(ordered[0], SESSION_DIMENSIONS[by])
            elif by == "entryPage":
                value = views[0].path if views else ""
            elif by == "exitPage":
                value = views[-1].path if views else ""
            else:
                raise ValueError(by)
            if not value:
                continue
            visitors.setdefault(value, set())
            if e.visitor_id:
                visitors[value].add(e.visitor_id)
            pageviews[value] += e.name == "pageview"
            counts[value] += 1
    rows = sorted(counts, key=lambda v: (-len(visitors[v]), -pageviews[v], v.encode("utf-8")))[
        :limit
    ]
    return {
        "by": by,
        "rows": [
            {
                "value": v,
                "visitors": len(visitors[v]),
                "pageviews": pageviews[v],
                "events": counts[v],
            }
            for v in rows
        ],
    }

"""Dashboard rows from storage, shaped into the response the contract describes."""

from __future__ import annotations

from ..domain.ids import iso
from ..domain.metrics import bounce_rate, mean_ms
from ..query import Query
from ..storage.dashboard import DashboardRows
from . import schemas as s


def _scalar(rows: list[tuple[object, ...]], index: int = 0) -> int:
    return int(rows[0][index] or 0) if rows else 0  # type: ignore[call-overload]


def build_dashboard(rows: DashboardRows, window: Query) -> s.Dashboard:
    by_day = {day: (int(events), int(pageviews)) for day, events, pageviews in rows.timeline}
    timeline = [
        s.DayPoint(
            day=day.isoformat(),
            events=by_day.get(day, (0, 0))[0],
            pageviews=by_day.get(day, (0, 0))[1],
            visitors=rows.day_visitors.get(day, 0),
        )
        for day in window.day_list()
    ]
    by_hour = {int(hour): int(count) for hour, count in rows.hours}
    sessions, with_pageviews, bounced, ends, total_duration = (
        rows.sessions[0] if rows.sessions else (0, 0, 0, 0, 0)
    )
    summary = s.Summary(
        total_events=sum(p.events for p in timeline),
        pageviews=sum(p.pageviews for p in timeline),
        unique_visitors=_scalar(rows.visitors),
        unique_sessions=int(sessions),
        avg_session_duration_ms=mean_ms(total_duration, int(ends)),
        bounce_rate=bounce_rate(int(bounced), int(with_pageviews)),
        bot_events=rows.bots,
    )
    return s.Dashboard(
        summary=summary,
        timeline=timeline,
        top_paths=[s.PathCount(path=k, views=int(c)) for k, c in rows.paths],
        top_referrers=[s.ReferrerCount(referrer=k, count=int(c)) for k, c in rows.referrers],
        browser_breakdown=[s.BrowserCount(browser=k, count=int(c)) for k, c in rows.browsers],
        device_breakdown=[s.DeviceCount(device_type=k, count=int(c)) for k, c in rows.devices],
        event_breakdown=[s.NameCount(name=k, count=int(c)) for k, c in rows.names],
        hourly_heatmap=[s.HourCount(hour=h, count=by_hour.get(h, 0)) for h in range(24)],
        recent_events=[
            s.RecentEvent(id=i, name=n, path=p, visitor_id=v, occurred_at=iso(t))
            for i, n, p, v, t in rows.recent
        ],
        live_visitors=_scalar(rows.live),
    )

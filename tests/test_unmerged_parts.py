"""The dashboard's session metrics (sessions, bounce rate, average duration) merge each session's
rows of ``session_days`` over the days of the window and the raw edges, and a UTC project's
visitors per day are the merged rows of ``visitors_daily`` (query/sql.py). Here is what those
merges must catch: a session over several days and a session id used again weeks later, bot and
other events in one session, a session's or a visitor's day written by two INSERTs, each event
stored by an INSERT of its own with merges stopped (every table then holds a part per INSERT,
unmerged), checked against the reference model (tests/reference.py) in zones with and without a
raw edge, with bots left out and counted."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from conftest import new_project
from reference import Sent, dashboard
from tally.storage.client import Storage
from test_local_time import answer_from, insert_events, zone_events

ZONES = ("UTC", "Europe/London", "Asia/Kathmandu", "America/New_York")


def awkward_sessions(now: datetime) -> list[list[Sent]]:
    """Groups of events, each group one INSERT: sessions over several days (their session_end
    events with and without a stated duration on a later day), a session id used again a month
    later, bot and other events in one session on one day and across days, a session's day
    written by two INSERTs, a session of bots only, and events without a session id."""
    day = (now - timedelta(hours=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    at = day + timedelta(hours=now.hour // 2, minutes=7)  # earlier today, never after now

    def ev(name, when, session, visitor="v", path="/", bot=False, **meta):
        return Sent(name, when, path, "", session, visitor, is_bot=bot, metadata=meta)

    groups: list[list[Sent]] = []
    for n in range(5):  # one session, five days, one INSERT each
        groups.append([ev("pageview", at - timedelta(days=n, minutes=n), "long", path=f"/d{n}")])
    groups.append([ev("session_end", at - timedelta(days=1, minutes=-3), "long")])
    groups.append([ev("session_end", at - timedelta(minutes=-4), "long", durationMs=2500)])
    # Across midnight UTC, and across Kathmandu's (18:15 UTC) and New York's midnights.
    for hour, minute, tag in ((23, 59, "utc"), (18, 14, "ktm"), (4, 59, "ny")):
        edge = day - timedelta(days=2) + timedelta(hours=hour, minutes=minute)
        groups.append([ev("pageview", edge, f"cross-{tag}")])
        groups.append([ev("pageview", edge + timedelta(minutes=2), f"cross-{tag}")])
        groups.append([ev("session_end", edge + timedelta(minutes=3), f"cross-{tag}")])
    groups.append([ev("pageview", at - timedelta(days=40), "again", path="/first")])
    groups.append([ev("pageview", at - timedelta(days=3), "again", path="/back")])
    groups.append([ev("session_end", at - timedelta(days=3, minutes=-1), "again")])
    groups.append([ev("pageview", at - timedelta(days=4), "mixed", bot=True)])
    groups.append([ev("pageview", at - timedelta(days=4, minutes=-1), "mixed")])
    groups.append([ev("pageview", at - timedelta(days=6), "mixed-days", bot=True)])
    groups.append([ev("pageview", at - timedelta(days=5), "mixed-days")])
    groups.append([ev("session_end", at - timedelta(days=5, minutes=-2), "mixed-days")])
    groups.append([ev("pageview", at - timedelta(days=2), "twice")])
    groups.append([ev("pageview", at - timedelta(days=2, minutes=-1), "twice", path="/2")])
    groups.append([ev("session_end", at - timedelta(days=2, minutes=-2), "twice")])
    groups.append([ev("pageview", at - timedelta(days=1), "crawler", "bot", bot=True)] * 2)
    groups.append([ev("pageview", at - timedelta(days=1, minutes=k), "") for k in range(3)])
    return groups


@contextmanager
def merges_stopped(storage: Storage, *tables: str) -> Iterator[None]:
    for table in tables:
        storage.command(f"SYSTEM STOP MERGES {storage.database}.{table}")
    try:
        yield
    finally:
        for table in tables:
            storage.command(f"SYSTEM START MERGES {storage.database}.{table}")


def distinct_times(events: list[Sent]) -> None:
    """Nudge equal times apart by a millisecond (the latest-events list needs an order)."""
    used: set[datetime] = set()
    for e in sorted(events, key=lambda e: e.occurred_at):
        while e.occurred_at in used:
            e.occurred_at -= timedelta(milliseconds=1)
        used.add(e.occurred_at)


def check(storage: Storage, project_id: str, events: list[Sent], now: datetime) -> None:
    for tz in ZONES:
        for days in (1, 3, 7, 90):
            for bots in (True, False):
                expected = dashboard(events, now, days, tz=tz, exclude_bots=bots)
                got = answer_from(storage, project_id, now, days, tz, bots)
                assert got == expected, f"{tz} days={days} exclude_bots={bots}"


def test_sessions_over_days_and_bot_flags_count_once_from_unmerged_parts(client):
    storage = client.app.state.storage
    project_id, _ = new_project(client)
    now = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    groups = awkward_sessions(now)
    bulk = zone_events(now, "Asia/Kathmandu", [], seed=17)
    distinct_times([e for g in groups for e in g] + bulk)
    with merges_stopped(storage, "session_days", "visitors_daily"):
        insert_events(storage, project_id, bulk)
        for group in groups:
            insert_events(storage, project_id, group)
        # A session's day and a visitor's day each in more than one unmerged row.
        for table, key in (("session_days", "session_hash"), ("visitors_daily", "visitor_hash")):
            rows, keys = storage.query(
                f"SELECT count(), uniqExact(day, {key}, is_bot) FROM {storage.database}.{table} "
                "WHERE project_id = {p:String}",
                {"p": project_id},
            )[0]
            assert rows > keys, table
        check(storage, project_id, bulk + [e for g in groups for e in g], now)

"""Upgrade to schema 007 with data written under 001-005: no history is lost. The day rollups are
altered in place (their rows read as is_bot = 0, as every event stored before carries), the
15-minute rollups are filled from ``events`` once, and applying the schema again adds nothing."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import msgspec

from conftest import migrate_before
from reference import Sent, dashboard
from tally.http.views import build_dashboard
from tally.query import Query
from tally.storage import dashboard as runner
from tally.storage.client import Storage, parse_url
from tally.storage.migrate import migrate
from test_dashboard import build_events, without_ids
from test_local_time import COLUMNS, _duration


def _insert(storage: Storage, project_id: str, events: list[Sent], with_bot: bool) -> None:
    columns = COLUMNS[: COLUMNS.index("is_bot") + (1 if with_bot else 0)]
    rows = [
        [
            project_id,
            e.name,
            e.occurred_at,
            e.occurred_at,
            e.path,
            "",
            e.referrer,
            e.session_id,
            e.visitor_id,
            e.browser,
            "Other",
            e.device_type,
            _duration(e),
            "{}",
            "",
            "",
            "k",
            int(e.is_bot),
        ][: len(columns)]
        for e in events
    ]
    storage.insert(f"{storage.database}.events", list(map(list, zip(*rows, strict=True))), columns)


def _answer(storage: Storage, project_id: str, now: datetime, days: int, tz: str) -> dict:
    query = Query(project_id, days, now, tz=tz)
    rows = asyncio.run(runner.fetch(storage, query))
    result = msgspec.to_builtins(build_dashboard(rows, query))
    assert result.pop("dataThrough") is None  # set by the handler, from the ingest log
    return without_ids(result)


def test_upgrade_keeps_history_and_backfills_once(chdb_path):
    storage = Storage(parse_url(f"chdb://{chdb_path}?database=z_{uuid.uuid4().hex[:10]}"), 4)
    db = storage.database
    try:
        migrate_before(storage, 6)  # 001-005, as migrate records them
        now = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
        project = "a" * 24
        before = [e for e in build_events(now, seed=21) if e.occurred_at <= now]
        _insert(storage, project, before, with_bot=False)  # 005 has is_bot, always 0 so far
        new = migrate(storage)
        assert "007_local_time_and_bots" in new
        quarters = f"SELECT sum(events) FROM {db}.events_quarter WHERE project_id = '{project}'"
        assert storage.query(quarters) == [(len(before),)]

        after = [
            Sent(
                "pageview",
                now - timedelta(seconds=30 + 61 * m),
                "/new",
                session_id="n",
                visitor_id="nv",
            )
            for m in range(3)
        ]
        after.append(Sent("pageview", now - timedelta(seconds=333), "/bot", is_bot=True))
        _insert(storage, project, after, with_bot=True)
        assert migrate(storage) == []  # applied again: the backfill does not run twice
        assert storage.query(quarters) == [(len(before) + len(after),)]
        events = before + after
        for tz in ("UTC", "Asia/Kathmandu", "America/New_York"):
            for days in (1, 7, 30, 90):
                expected = dashboard(events, now, days, tz=tz)
                assert _answer(storage, project, now, days, tz) == expected, (tz, days)
    finally:
        storage.close()

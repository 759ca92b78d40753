"""The report lane (storage/client.py, http/gone.py): dashboards, breakdowns and the query API run
their queries on threads of their own, and a request whose client goes away stops its queries:
those waiting for a thread never run, those running are killed. Freshness and health while the
lane is busy: tests/test_loader.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx

from conftest import auth
from served import Server

# About 500 s of the engine's time and no CPU: a query that ends only when it is killed.
ENDLESS = "SELECT sum(sleepEachRow(0.5)) FROM numbers(1000) SETTINGS max_block_size = 1"
RUNNING = "SELECT count() FROM system.processes WHERE startsWith(query, '/* tally-report')"


def test_a_cancelled_report_is_killed_and_one_waiting_for_a_thread_never_runs(make_client):
    with make_client(clickhouse_pool_size=2) as client:  # one report thread
        storage = client.app.state.storage
        assert storage.report_threads == 1

        async def scenario() -> tuple[Any, ...]:
            endless = asyncio.ensure_future(storage.report(ENDLESS))
            behind = asyncio.ensure_future(storage.report("SELECT 1"))
            deadline = time.monotonic() + 60
            while (await storage.aquery(RUNNING))[0][0] != 1:
                assert time.monotonic() < deadline, "the report never started"
                await asyncio.sleep(0.02)
            busy = dict(storage.reports)
            endless.cancel()
            behind.cancel()
            for task in (endless, behind):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            # The only thread is free again: the endless query was killed.
            after = await asyncio.wait_for(storage.report("SELECT 42"), 60)
            while (await storage.aquery(RUNNING))[0][0] != 0:
                assert time.monotonic() < deadline, "the killed query is still listed"
                await asyncio.sleep(0.02)
            return busy, after, dict(storage.reports)

        busy, after, counts = client.blocking_portal.call(scenario)
        assert busy == {"waiting": 1, "running": 1, "stopped": 0}
        assert after == [(42,)]
        assert counts == {"waiting": 0, "running": 0, "stopped": 2}


def test_requests_whose_clients_left_stop_their_queries(tmp_path: Any) -> None:
    """A real ``tally serve`` with one report thread: six dashboards asked at once, each client
    leaving after 50 ms (a site owner clicking through filters), queue a few dozen queries on that
    thread; those of the clients that left stop (health counts them) and the server answers the
    next dashboard, with the numbers it gave before."""
    server = Server(tmp_path, TALLY_CLICKHOUSE_POOL_SIZE="2")
    try:
        project, key = server.new_project("clicks", "clicks")
        today = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
        events = [
            {
                "name": "pageview",
                "path": f"/p{i % 7}",
                "visitorId": f"v{i % 13}",
                "sessionId": f"s{i % 17}",
                "referrer": "https://www.google.com/" if i % 2 else "",
                "occurredAt": (today - timedelta(days=i % 5)).isoformat().replace("+00:00", "Z"),
            }
            for i in range(100)
        ]
        server.collect(key, events)

        def url(source: str) -> str:
            filters = quote(json.dumps([["is", "source", [source]]]))
            return f"{server.url}/api/dashboard?projectId={project}&days=7&filters={filters}"

        def leave_early(source: str) -> None:
            with contextlib.suppress(httpx.TimeoutException):
                httpx.get(url(source), headers=auth("clicks"), timeout=0.05)

        with httpx.Client(timeout=60) as http:
            before = http.get(url("Google"), headers=auth("clicks")).json()
        with ThreadPoolExecutor(6) as pool:
            list(pool.map(leave_early, ["Google", "Direct / None"] * 3))
        with httpx.Client(timeout=60) as http:
            deadline = time.monotonic() + 120
            while True:
                lane = http.get(f"{server.url}/api/health").json()["reports"]
                if lane["waiting"] == 0 and lane["running"] == 0:
                    break
                assert time.monotonic() < deadline, lane
                time.sleep(0.05)
            assert lane["threads"] == 1
            assert lane["stopped"] >= 1, lane
            answer = http.get(url("Google"), headers=auth("clicks"))
        assert answer.status_code == 200, answer.text
        assert answer.json()["summary"] == before["summary"]
        assert answer.json()["timeline"] == before["timeline"]
        assert 0 < before["summary"]["totalEvents"] < 100
        log = (tmp_path / f"serve-{server.port}.log").read_text()
        assert "Traceback" not in log and " 500" not in log, log[-3000:]
    finally:
        server.stop()

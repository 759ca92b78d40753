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
import pytest

from conftest import auth, within_one_month
from served import Server
from tally.config import load_settings
from tally.storage.client import (
    ReportTooLarge,
    StorageUnavailable,
    _unavailable_on_failure,
    together,
)

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


# A minute of the engine's time and no CPU.
MINUTE = "SELECT sum(sleepEachRow(0.5)) FROM numbers(120) SETTINGS max_block_size = 1"
# Some 100 MiB of the engine's memory: three million distinct strings.
HUNGRY = "SELECT uniqExact(toString(number)) FROM numbers(3000000)"


def test_a_report_over_its_memory_cap_fails_alone(make_client):
    """``TALLY_REPORT_MEMORY_MB`` caps each report query: over it the report is ReportTooLarge
    (not the engine's out-of-memory for everyone), the same statement on the control lane is not
    capped, and the lane answers the next report."""
    with make_client(report_memory_mb=8) as client:
        storage = client.app.state.storage
        assert storage.report_memory == 8 * 2**20

        async def scenario() -> tuple[Any, ...]:
            try:
                await storage.report(HUNGRY)
            except ReportTooLarge as exc:
                refused = exc
            else:
                raise AssertionError("the report ran past its cap")
            return refused, await storage.aquery(HUNGRY), await storage.report("SELECT 42")

        refused, uncapped, after = client.blocking_portal.call(scenario)
        assert refused.limit_mib == 8
        assert uncapped == [(3_000_000,)]
        assert after == [(42,)]
        assert storage.reports == {"waiting": 0, "running": 0, "stopped": 0}
        health = client.get("/api/health").json()["reports"]
        assert health["memoryMb"] == 8


def test_when_one_query_of_a_view_fails_the_others_stop(make_client):
    """A view's queries run together (storage/client.py's ``together``): when one fails, here
    over the memory cap, its failure is raised once the others are stopped, not left running,
    unawaited, for an answer already given (``asyncio.gather`` left them to their end)."""
    with make_client(report_memory_mb=8, clickhouse_pool_size=4) as client:
        storage = client.app.state.storage
        assert storage.report_threads == 2

        async def scenario() -> tuple[Any, ...]:
            try:
                await together(storage.report(MINUTE), storage.report(HUNGRY))
            except ReportTooLarge as exc:
                refused = exc
            else:
                raise AssertionError("the hungry report ran past its cap")
            deadline = time.monotonic() + 30
            while (await storage.aquery(RUNNING))[0][0] or storage.reports["running"]:
                assert time.monotonic() < deadline, "the other report runs on"
                await asyncio.sleep(0.05)
            return refused, dict(storage.reports), await storage.report("SELECT 42")

        refused, counts, after = client.blocking_portal.call(scenario)
        assert refused.limit_mib == 8
        assert counts == {"waiting": 0, "running": 0, "stopped": 1}
        assert after == [(42,)]


def test_the_default_cap_is_a_quarter_of_the_engines_memory(make_client):
    with make_client() as client:
        storage = client.app.state.storage
        engine = storage.query(
            "SELECT toUInt64(value) FROM system.server_settings"
            " WHERE name = 'max_server_memory_usage'"
        )[0][0]
        assert engine > 0
        assert storage.report_memory == engine // 4
        assert client.get("/api/health").json()["reports"]["memoryMb"] == engine // 4 // 2**20


def test_a_query_over_the_cap_is_answered_400_in_plain_words_and_ingestion_goes_on(
    tmp_path: Any,
) -> None:
    """A real ``tally serve`` whose reports may use 4 MiB: the query API's four-dimension
    breakdown, and a filtered dashboard, are 400 naming the cap (never 503, which asks to retry,
    nor 500), logged for the operator; the unfiltered dashboard is answered; events are still
    collected and loaded, and health answers with no report left running."""
    server = Server(tmp_path, TALLY_REPORT_MEMORY_MB="4")
    try:
        project, key = server.new_project("hungry", "hungry")
        # In one month (one partition of each table): the plain dashboard's reads of two monthly
        # partitions need more than the cap, and it was refused on the first days of a month.
        # The cap sits well between what each view needs, measured by a one-off script (not in
        # the repo) that searched the report clients' max_memory_usage for the least each view
        # is answered under, over these 8,000 events (three searches each, 2026-12-02):
        # the plain dashboard 1.06-1.09 MiB (its reads' buffers, about 0.75 MiB for any
        # project), the query below 15.2-16.1 MiB, the filtered dashboard 14.2-15.2 MiB. At
        # 2,000 events under a 1 MiB cap the plain one needed 0.5-0.84 MiB, and under load it
        # was refused at random.
        hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
        today = within_one_month(timedelta(hours=200), hour)
        events = [
            {
                "name": "pageview",
                "path": f"/page/{i}",
                "visitorId": f"v{i}",
                "sessionId": f"s{i}",
                "referrer": f"https://site{i}.example/",
                "occurredAt": (today - timedelta(hours=i % 200)).isoformat().replace("+00:00", "Z"),
            }
            for i in range(8000)
        ]
        server.collect(key, events)
        body = {
            "site_id": project,
            "metrics": ["visitors", "visits", "pageviews"],
            "date_range": "28d",
            "dimensions": ["time:hour", "event:page", "referrer", "visit:entry_page"],
        }
        with httpx.Client(timeout=120) as http:
            answer = http.post(f"{server.url}/api/v2/query", json=body, headers=auth("hungry"))
            assert answer.status_code == 400, answer.text
            assert answer.json()["error"] == "Invalid payload"
            (detail,) = answer.json()["details"]
            assert detail["path"] == "$"
            assert "needs more memory than one report may use (4 MiB" in detail["message"]
            assert "TALLY_REPORT_MEMORY_MB" in detail["message"]
            # A GET view over the cap is the query string's 400, in the same words; a view
            # that needs less is answered as ever.
            contains = quote(json.dumps([["contains", "path", ["page"]]]))
            view = f"{server.url}/api/dashboard?projectId={project}&days=30"
            refused = http.get(f"{view}&filters={contains}", headers=auth("hungry"))
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"] == "Invalid query"
            (refusal,) = refused.json()["details"]
            assert refusal["path"] == "$"
            # The same words, with the hint of its own request (tests/test_memory_message.py).
            cap = "needs more memory than one report may use (4 MiB, TALLY_REPORT_MEMORY_MB); "
            assert detail["message"].startswith(cap) and refusal["message"].startswith(cap)
            assert "narrower filters" in refusal["message"]
            assert "dimensions" not in refusal["message"]
            plain = http.get(view, headers=auth("hungry"))
            assert plain.status_code == 200, plain.text
            assert plain.json()["summary"]["totalEvents"] == 8000
            # The refused views' other queries were stopped (KILL ... ASYNC): the lane is free
            # once the engine has ended them, which it does in its own time.
            deadline = time.monotonic() + 60
            while True:
                lane = http.get(f"{server.url}/api/health").json()["reports"]
                if (lane["running"] == 0 and lane["waiting"] == 0) or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert lane["memoryMb"] == 4
            assert lane["running"] == 0 and lane["waiting"] == 0, lane
        server.collect(key, [{**events[0], "path": "/after"}])  # loaded: ingestion goes on
        log = (tmp_path / f"serve-{server.port}.log").read_text()
        assert "POST /api/v2/query: a report needed more than its 4 MiB" in log, log[-3000:]
        assert "GET /api/dashboard: a report needed more than its 4 MiB" in log, log[-3000:]
        assert "Traceback" not in log, log[-3000:]
    finally:
        server.stop()


def test_a_read_the_engine_fails_is_503_and_the_operator_is_told_why(make_client, caplog):
    with make_client() as client:
        project = client.post("/api/projects", json={"name": "gone"}, headers=auth("gone"))
        project_id = project.json()["projectId"]
        storage = client.app.state.storage
        storage.command("RENAME TABLE events TO events_away")
        try:
            with caplog.at_level("WARNING", logger="tally.http"):
                answer = client.get(
                    f"/api/dashboard?projectId={project_id}&days=7", headers=auth("gone")
                )
            # The readiness check says so too (it answered 200 from a SELECT 1); liveness is
            # the worker's alone.
            health = client.get("/api/health")
            live = client.get("/api/health/live")
        finally:
            storage.command("RENAME TABLE events_away TO events")
        assert answer.status_code == 503
        assert answer.json() == {"error": "Storage unavailable"}
        assert (health.status_code, health.json()) == (503, {"error": "Storage unavailable"})
        assert live.status_code == 200
        assert client.get("/api/health").status_code == 200
        (line, said) = [
            r.getMessage() for r in caplog.records if "storage unavailable" in r.getMessage()
        ]
        assert said.startswith("storage unavailable on GET /api/health: "), said
        assert line.startswith("storage unavailable on GET /api/dashboard: ")
        assert "UNKNOWN_TABLE" in line or "events" in line, line
        assert "\n" not in line
        again = client.get(f"/api/dashboard?projectId={project_id}&days=7", headers=auth("gone"))
        assert again.status_code == 200


def test_a_negative_cap_is_refused_at_start_in_plain_words():
    with pytest.raises(SystemExit, match=r"TALLY_REPORT_MEMORY_MB must be 0 .* got -1"):
        load_settings(environ={"TALLY_REPORT_MEMORY_MB": "-1"}, env_file=None)
    settings = load_settings(environ={"TALLY_REPORT_MEMORY_MB": "512"}, env_file=None)
    assert settings.report_memory_mb == 512


@pytest.mark.parametrize(
    "broken",
    [
        UnicodeDecodeError("utf-8", b"\xd0", 0, 1, "invalid continuation byte"),
        IndexError("index out of range"),
    ],
)
def test_an_answer_the_reader_cannot_decode_is_storage_unavailable(broken):
    """Bytes clickhouse-connect's reader cannot decode are a 503 to retry (Storage unavailable),
    not a 500. They came (tests/faults/test_resources.py once got a 500 so, and a 1 MiB cap over
    2000 events gave one in about ten dashboards) from a failed stream's unread blocks reaching
    the next query on the same engine handle, which storage/client.py now prevents
    (tests/test_stale_stream.py); this checks the mapping every storage call goes through,
    should other such bytes come."""
    with (
        pytest.raises(StorageUnavailable, match="answer could not be read"),
        _unavailable_on_failure(),
    ):
        raise broken

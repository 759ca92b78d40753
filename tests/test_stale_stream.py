"""A failed query leaves nothing behind for the next one (storage/client.py, ``Storage.client``).

On the embedded engine, when a query's result stream fails partway (an engine error while its
blocks stream, or the query killed because its caller left), the engine keeps the stream's
unread blocks on that connection handle and hands them to the next query made on it: that query
then failed to decode, or, when the old blocks parsed, returned the failed query's rows before
its own (found 2026-12-02: a ``count()`` of system.processes answered 1.8M rows of a killed
query). A report killed on one tenant's dashboard could so put its rows into the next tenant's
answer. Each test runs the next query on the very client the failed one used: a pool of two is
one client per lane."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tally.storage.client import ReportTooLarge, Storage, StorageUnavailable, parse_url

# Rows that stream in many blocks, then an engine error partway.
FAILS_PARTWAY = (
    "SELECT number, toString(number) AS s, throwIf(number = 150000, 'partway') FROM numbers(300000)"
    " SETTINGS max_block_size = 1000"
)
# Rows that stream slowly (10 ms a block), for seconds: killed while they stream.
SLOW_STREAM = (
    "SELECT number, toString(number) AS s, sleepEachRow(0.001) FROM numbers(20000)"
    " SETTINGS max_block_size = 10"
)
SMALL = "SELECT number, toString(number) AS s FROM numbers(3)"
EXACT = [(0, "0"), (1, "1"), (2, "2")]
STREAMING = "SELECT count() FROM system.processes WHERE query LIKE '%sleepEachRow(0.001)%'"


@pytest.fixture
def storage(chdb_path: Path) -> Any:
    storage = Storage(parse_url(f"chdb://{chdb_path}?database=s_{uuid.uuid4().hex[:10]}"), 2)
    assert storage.report_threads == 1 and storage._pool.qsize() == 1
    yield storage
    storage.close()


def test_after_a_query_fails_partway_the_next_gets_only_its_own_rows(storage: Storage) -> None:
    for _ in range(3):
        with pytest.raises(StorageUnavailable, match="partway"):
            storage.query(FAILS_PARTWAY)
        assert storage.query(SMALL) == EXACT
        assert storage.query("SELECT 42") == [(42,)]


def test_after_a_report_is_killed_the_next_report_gets_only_its_own_rows(storage: Storage) -> None:
    async def scenario() -> tuple[list[Any], dict[str, int]]:
        answers = []
        for _ in range(3):
            slow = asyncio.ensure_future(storage.report(SLOW_STREAM))
            deadline = time.monotonic() + 60
            while (await storage.aquery(STREAMING))[0][0] < 2:  # itself, and the slow one
                assert time.monotonic() < deadline, "the slow report never started"
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.3)  # some of its blocks are read, more are on their way
            slow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await slow
            # The only report thread, as soon as the killed query has given it back.
            answers.append(await asyncio.wait_for(storage.report(SMALL), 60))
        return answers, dict(storage.reports)

    answers, counts = asyncio.run(scenario())
    assert answers == [EXACT] * 3
    assert counts == {"waiting": 0, "running": 0, "stopped": 3}


def test_a_client_replaced_after_a_failure_keeps_its_lanes_settings(storage: Storage) -> None:
    """The report lane's client made after a failure has the lane's memory cap; the control
    lane's has none: a report over the cap is refused as before, the same query on the control
    lane runs. Each failed client is closed and a new one stands in its place."""
    hungry = "SELECT uniqExact(toString(number)) FROM numbers(3000000)"
    capped = Storage(storage.target, 2, report_memory_mb=8)
    try:
        before = list(capped._clients)
        with pytest.raises(StorageUnavailable, match="partway"):
            capped.query(FAILS_PARTWAY, pool=capped._report_pool)
        with pytest.raises(StorageUnavailable, match="partway"):
            capped.query(FAILS_PARTWAY)
        assert len(capped._clients) == 2
        assert not set(map(id, capped._clients)) & set(map(id, before))
        with pytest.raises(ReportTooLarge, match="more than its 8 MiB"):
            asyncio.run(capped.report(hungry))
        assert capped.query(hungry) == [(3_000_000,)]
    finally:
        capped.close()

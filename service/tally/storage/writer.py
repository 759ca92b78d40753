"""Group commit: many requests' events, one INSERT, and an acknowledgement only once it is stored.

Requests append rows to a shared buffer and wait. A flusher task takes the whole buffer as one
INSERT when it is old enough (``max_delay``) or big enough (``max_events``). Up to ``max_inflight``
INSERTs run at once (each on its own pooled client): while they run, the next batch accumulates,
so under load a request waits about one INSERT's time, and a slow INSERT does not hold up the
batches behind it. A failed
INSERT is retried with the same ``insert_deduplication_token``, so a retry of an INSERT whose answer
was lost stores nothing twice (the events table and every rollup deduplicate on the token). When
the retries are spent, every waiter of that batch is told the storage is unavailable and nothing of
it is acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from .client import Storage, StorageUnavailable

__all__ = ["EVENT_COLUMNS", "BatchWriter", "Overloaded", "StorageUnavailable", "events_inserter"]

log = logging.getLogger("tally.writer")

# Columns of ``events`` that Tally writes, in the order of each row tuple (as in
# schema/001_events.sql). Timestamps travel as seconds since the epoch with the milliseconds as
# the fraction (a float's shortest form is exact to the millisecond for every date up to 9999).
EVENT_COLUMNS: tuple[str, ...] = (
    "project_id",
    "name",
    "occurred_at",
    "received_at",
    "path",
    "url",
    "referrer",
    "session_id",
    "visitor_id",
    "browser",
    "os",
    "device_type",
    "duration_ms",
    "metadata",
    "ip",
    "user_agent",
    "key_id",
    # schema/005_event_dimensions.sql
    "source",
    "channel",
    "utm_source",
    "utm_medium",
    "utm_campaign",
    "utm_content",
    "utm_term",
    "country",
    "is_bot",
)

# In cluster mode the session adds storage.client.CLUSTER_SETTINGS to these: the INSERT into the
# Distributed ``events`` returns only once every shard stored its rows, and the token below
# reaches each shard's replicated tables, so a retry is deduplicated there.
INSERT_SETTINGS: dict[str, Any] = {
    "async_insert": 0,
    "insert_deduplicate": 1,
    "deduplicate_blocks_in_dependent_materialized_views": 1,
    # Events of one batch may span many months; one old event must not fail everyone's batch.
    "throw_on_max_partitions_per_insert_block": 0,
    # The seven rollup views of one INSERT run side by side rather than one after another:
    # ~10-15% less time per INSERT measured here, so less time for the next batch to wait.
    "parallel_view_processing": 1,
}


class Overloaded(Exception):
    """The buffer is full: the caller should retry later."""


InsertFn = Callable[[list[tuple[Any, ...]], str], None]


class BatchWriter:
    """Buffers rows from many requests and stores them with one INSERT per batch."""

    def __init__(
        self,
        insert: InsertFn,
        *,
        max_events: int = 20_000,
        max_delay: float = 0.002,
        attempts: int = 4,
        backoff: float = 0.1,
        buffer_limit: int | None = None,
        max_inflight: int = 1,
        buffer_limit_bytes: int = 0,
    ) -> None:
        self._insert = insert
        self.max_events = max(1, max_events)
        self.max_delay = max(0.0, max_delay)
        self.attempts = max(1, attempts)
        self.backoff = backoff
        self.buffer_limit = buffer_limit or self.max_events * 10
        self.max_inflight = max(1, max_inflight)
        self.buffer_limit_bytes = buffer_limit_bytes  # 0: no byte bound
        self._pending_bytes = 0
        self._flushes: set[asyncio.Task[None]] = set()
        self._slot_freed = asyncio.Event()
        self._rows: list[tuple[Any, ...]] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._first_at = 0.0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._inflight = 0
        # Counters for tests and the health endpoint.
        self.batches = 0
        self.rows_written = 0
        self.failed_batches = 0

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="tally-writer")

    async def stop(self) -> None:
        """Flush what is buffered, then stop. New writes are refused from now on."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
            self._task = None

    @property
    def pending(self) -> int:
        return len(self._rows) + self._inflight

    # --- request side ------------------------------------------------------------------------
    async def write(self, rows: Sequence[tuple[Any, ...]], size: int = 0) -> None:
        """Return once ``rows`` are durably stored; raise StorageUnavailable or Overloaded.

        ``size`` (the request's bytes) counts against the byte bound of the buffer.
        """
        if self._closing or self._task is None:
            raise StorageUnavailable("writer is not running")
        if self.pending + len(rows) > self.buffer_limit or (
            self.buffer_limit_bytes and self._pending_bytes + size > self.buffer_limit_bytes
        ):
            raise Overloaded
        self._pending_bytes += size
        try:
            await self._enqueue(rows)
        finally:
            self._pending_bytes -= size

    async def _enqueue(self, rows: Sequence[tuple[Any, ...]]) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not self._rows:
            self._first_at = time.monotonic()
        self._rows.extend(rows)
        self._waiters.append(future)
        self._wake.set()
        # Shielded: a client that goes away does not cancel the batch its events are in.
        await asyncio.shield(future)

    # --- flusher -----------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._rows:
                if self._closing:
                    if self._flushes:
                        await asyncio.gather(*self._flushes)
                    return
                continue
            if not self._closing and len(self._rows) < self.max_events:
                # Let concurrent requests join the batch, up to the age bound.
                wait = self._first_at + self.max_delay - time.monotonic()
                if wait > 0:
                    await self._sleep_or_full(wait)
            while len(self._flushes) >= self.max_inflight:
                self._slot_freed.clear()
                await self._slot_freed.wait()
            rows, waiters = self._rows, self._waiters
            self._rows, self._waiters = [], []
            self._inflight += len(rows)
            task = asyncio.get_running_loop().create_task(self._flush(rows, waiters))
            self._flushes.add(task)
            task.add_done_callback(self._flush_done)
            if self._rows or self._closing:
                self._wake.set()

    def _flush_done(self, task: asyncio.Task[None]) -> None:
        self._flushes.discard(task)
        self._slot_freed.set()

    async def _sleep_or_full(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self._rows) < self.max_events and not self._closing:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), remaining)
            except TimeoutError:
                return

    async def _flush(
        self, rows: list[tuple[Any, ...]], waiters: list[asyncio.Future[None]]
    ) -> None:
        token = uuid.uuid4().hex
        error: BaseException | None = None
        try:
            for attempt in range(self.attempts):
                try:
                    await asyncio.to_thread(self._insert, rows, token)
                    error = None
                    break
                except Exception as exc:
                    error = exc
                    log.warning(
                        "insert of %d events failed (attempt %d/%d): %s",
                        len(rows),
                        attempt + 1,
                        self.attempts,
                        exc,
                    )
                    if attempt + 1 < self.attempts:
                        await asyncio.sleep(self.backoff * (2**attempt))
        finally:
            self._inflight -= len(rows)
        if error is None:
            self.batches += 1
            self.rows_written += len(rows)
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
        else:
            self.failed_batches += 1
            log.error("dropping batch of %d unacknowledged events: storage unavailable", len(rows))
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(StorageUnavailable(str(error)))


def events_inserter(storage: Storage, fault_file: str = "") -> InsertFn:
    """The insert function that stores a batch of event rows in ``events``.

    ``fault_file`` is for fault tests only: while that file exists and says ``fail``, every
    INSERT fails; when it says ``lose``, every INSERT succeeds but its answer is lost (raises
    afterwards), so the writer retries an INSERT that was in fact stored.
    """
    table = f"{storage.database}.events"

    def insert(rows: list[tuple[Any, ...]], token: str) -> None:
        fault = _fault(fault_file)
        if fault == "fail":
            raise StorageUnavailable("injected fault: insert refused")
        # One JSON array per row, encoded by msgspec in C and parsed by ClickHouse in C++ (which
        # releases the GIL): the Python side of an INSERT costs well under a microsecond per
        # event. A Native block built by clickhouse-connect in Python cost ~6 µs per event, all
        # of it under the GIL that the HTTP side needs.
        storage.raw_insert(
            table,
            EVENT_COLUMNS,
            _encode_lines(rows),
            fmt="JSONCompactEachRow",
            settings={**INSERT_SETTINGS, "insert_deduplication_token": token},
        )
        if fault == "lose":
            raise StorageUnavailable("injected fault: answer lost after the insert")

    return insert


_encode_lines = msgspec.json.Encoder().encode_lines


def _fault(path: str) -> str:
    if not path:
        return ""
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return ""

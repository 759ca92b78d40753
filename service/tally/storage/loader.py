"""The loader: each sealed segment of the ingest log becomes one INSERT, then is deleted.

The active segment is sealed once it is ``seal_age`` old (or, by the log, ``seal_bytes`` big), so
under load ClickHouse sees about one INSERT per ``seal_age`` per worker and an idle event waits
at most about ``seal_age`` plus one INSERT before it can be read. The INSERT carries the segment's
id as ``insert_deduplication_token``: if the process dies after the INSERT and before the delete,
loading the segment again stores nothing twice, in ``events`` and in every rollup. While
ClickHouse is down the loader retries with exponential backoff (``backoff_min`` to
``backoff_max``) and the log grows up to its cap; when it is back the loader catches up by itself,
oldest segment first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .ingestlog import (
    IngestLog,
    Pause,
    Segment,
    _no_pause,
    keep_damaged,
    pending_segments,
    read_segment,
    say_damaged,
)
from .writer import StaleDeduplication

__all__ = ["Loader", "SegmentInsert"]

log = logging.getLogger("tally.loader")

# (column names, JSONCompactEachRow body, deduplication token) -> stored, or raises.
SegmentInsert = Callable[[Sequence[str], bytes, str], None]

ADOPT_INTERVAL = 10.0  # seconds between looks for slots left by workers that are gone
# The exit status of a process stopped because its embedded engine must be opened again.
RESTART_EXIT_STATUS = 75  # EX_TEMPFAIL


class Loader:
    def __init__(
        self,
        ingest: IngestLog,
        insert: SegmentInsert,
        *,
        backoff_min: float = 0.1,
        backoff_max: float = 5.0,
        pause: Pause = _no_pause,
    ) -> None:
        self.log = ingest
        self._insert = insert
        self.backoff_min = backoff_min
        self.backoff_max = max(backoff_min, backoff_max)
        self._pause = pause
        self._task: asyncio.Task[None] | None = None
        # The loader's own thread (from start to stop): an INSERT never queues behind dashboard
        # queries or any other call of the process in a shared pool of threads.
        self._thread: ThreadPoolExecutor | None = None
        self._stopping = False
        self._idle = asyncio.Event()
        # Counters for the health endpoint, benchmarks and tests.
        self.inserts = 0
        self.loaded_events = 0
        self.failures = 0
        self.last_error = ""
        # Monotonic times the idle loader planned to wake at by itself, latest last (tests).
        self.planned_wakes: deque[float] = deque(maxlen=64)

    def start(self) -> None:
        if self._task is None:
            self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tally-loader")
            self._task = asyncio.get_running_loop().create_task(self._run(), name="tally-loader")

    async def stop(self, timeout: float) -> None:
        """Load what is sealed, for at most ``timeout`` seconds (call after the log's stop,
        which seals the active segment); what is not loaded then stays for the next start."""
        self._stopping = True
        self.log.changed.set()
        if self._task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
        except TimeoutError:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        finally:
            self._task = None
            if self._thread is not None:
                self._thread.shutdown(wait=False)
                self._thread = None
        left = self.log.sealed()
        if left:
            log.warning(
                "stopping with %d segment(s) (%d events) not loaded: they load at the next start",
                len(left),
                sum(s.events for s in left),
            )

    async def flush(self) -> None:
        """Seal the active segment and return once every sealed segment is loaded (tests and
        tools: a quiet service would otherwise wait for the seal age)."""
        await self.log.seal(force=True)
        while self.log.sealed():
            self._idle.clear()
            self.log.changed.set()
            await self._idle.wait()

    async def loaded_through(self, cut_ms: int) -> None:
        """Return once every event the log holds from before ``cut_ms`` (epoch ms) is loaded,
        in every slot of this data folder: this process's active segment is sealed at once when
        it was begun before then, other processes' segments load at their seal age. While
        ClickHouse refuses the INSERTs it waits on (the caller bounds it).

        The cut is kept on the monotonic clock: every segment seen in the log until the
        monotonic clock passes it (and those there when it does) is waited for, whatever the
        stamps in their names. The wall clock may be set back while this waits (an NTP
        correction): measured by it, the cut was an hour away again and a deletion answered 503
        after 30 s with the log long loaded; and a segment begun before the call may carry a
        later stamp than ``cut_ms``."""
        if self.log.noop:
            return
        cut_mono = self.log.monotonic() + (cut_ms - self.log.wall_ms()) / 1000
        held: set[tuple[str, int]] = set()
        passed = False
        while True:
            adding = not passed  # until the cut has passed, every segment there is waited for
            passed = passed or self.log.monotonic() >= cut_mono
            pending = set(pending_segments(self.log.root))
            held = pending if adding else held & pending
            if passed and not held:
                return
            if self.log.active_key() in held:
                await self.log.seal(force=True)
            await asyncio.sleep(0.02)

    async def _run(self) -> None:
        await self._blocking(self.log.adopt)
        adopted_at = time.monotonic()
        backoff = self.backoff_min
        while True:
            await self.log.seal()
            if time.monotonic() - adopted_at >= ADOPT_INTERVAL:
                adopted_at = time.monotonic()
                await self._blocking(self.log.adopt)
            segments = self.log.sealed()
            failed = False
            for segment in segments:
                try:
                    await self._load(segment)
                except StaleDeduplication as exc:
                    self._restart(f"cannot load {segment.path.name}: {exc}")
                except Exception as exc:
                    self.failures += 1
                    self.last_error = str(exc)
                    log.warning(
                        "cannot load %s (%d events), retrying in %.1f s: %s",
                        segment.path.name,
                        segment.events,
                        backoff,
                        exc,
                    )
                    failed = True
                    break
            if failed:
                self._idle.set()
                if self._stopping:
                    return
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.backoff_max)
                continue
            backoff = self.backoff_min
            if self.log.sealed():
                continue
            self._idle.set()
            if self._stopping:
                return
            # Sleep until the active segment is due to seal, or until a segment is started or
            # sealed (the log says so), or until it is time to look for orphaned slots.
            self.log.changed.clear()
            due = self.log.seal_due_in()
            wait = min(due if due is not None else ADOPT_INTERVAL, ADOPT_INTERVAL)
            self.planned_wakes.append(time.monotonic() + wait)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.log.changed.wait(), max(wait, 0.001))

    def _restart(self, reason: str) -> None:
        """Stop this process at once, as a kill would: loading the segment again here would be
        dropped as a duplicate and the segment deleted, its events lost. The next process (a
        respawned worker, or the service manager's restart) forgets the engine's stale records
        when it opens the engine (dedup_log.py) and loads the segment, still on disk."""
        log.critical(
            "%s. This process exits now, so that the engine is opened again; the segment stays "
            "in the ingest log and loads in the next process",
            reason,
        )
        logging.shutdown()
        os._exit(RESTART_EXIT_STATUS)

    async def _blocking(self, fn: Callable[..., None], *args: object) -> None:
        """``fn(*args)`` on the loader's own thread."""
        await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    async def _load(self, segment: Segment) -> None:
        await self._blocking(self._load_blocking, segment)
        self.log.forget(segment)

    def _load_blocking(self, segment: Segment) -> None:
        if segment.loaded:  # stored; only its deletion failed (a read-only folder): retry that
            self.log.delete_file(segment)
            return
        self.log.cut_to_size(segment)
        try:
            contents = read_segment(segment.path, segment.size)
        except FileNotFoundError:
            # Deleted by something other than Tally (its folder removed by hand): nothing to
            # load, and retrying would stop every segment after it.
            log.error(
                "segment %s is gone from disk before it was loaded: its %d acknowledged "
                "events are lost",
                segment.path,
                segment.events,
            )
            return
        if contents.segment_id is None:
            kept = keep_damaged(segment.path, move=True)
            log.error(
                "segment %s lost its header on disk: its %d acknowledged events cannot be "
                "loaded. The file is kept as %s",
                segment.path,
                segment.events,
                kept,
            )
            return
        if contents.good < contents.size and not segment.damage_said:
            # A sealed segment holds complete records only: this one was damaged on disk. Said
            # (and copied) once, not at every retry of an outage.
            say_damaged(segment.path, contents, keep_damaged(segment.path))
            segment.damage_said = True
        events = contents.events
        if events:
            self._pause("before_load", True)
            self._pause("during_insert", False)  # says so, then lets the INSERT run
            self._insert(contents.columns, contents.body(), f"tally-segment-{contents.segment_id}")
            self._pause("during_insert", True)
            self._pause("after_insert", True)
            self.inserts += 1
            self.loaded_events += events
        segment.loaded = True
        self.log.delete_file(segment)
        log.debug("loaded %s: %d events", Path(segment.path).name, events)

"""In-memory view of the API keys, so a collect request never queries ClickHouse for its key.

The registry holds the hash of every live key. It refreshes incrementally every
``refresh_interval`` seconds (bounding how long a key revoked by another process stays usable).
A request with an unknown key waits for the next early refresh, of which there is at most one per
``miss_interval`` for all callers together: a key created by another process works at once, while
a flood of invalid keys costs at most a couple of queries a second. Keys created or revoked by
this process take effect immediately. Last-use times are kept here and written in one INSERT
every few seconds.

No wall-clock time decides anything here: the clock may be set back while a worker runs (an NTP
correction), and a row written after that carries an older time than rows written before it.
A revocation is final (a revoked key is never live again), so applying one drops the key whatever
its times; the refresh asks for rows by their version, which is always above the version of the
row it replaces (storage/projects.py), not by their ``updated_at``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime

from ..domain.ids import utcnow
from .client import StorageUnavailable
from .projects import KeyRecord, ProjectStore

log = logging.getLogger("tally.keys")

# Rows written by another process may carry a version (microseconds) slightly below the highest
# one read before they became visible (an INSERT under way, another process's clock a little
# behind); re-reading this much version history makes the incremental refresh safe against that.
_OVERLAP = 30_000_000


class KeyRegistry:
    def __init__(
        self,
        store: ProjectStore,
        refresh_interval: float = 2.0,
        miss_interval: float = 0.5,
        usage_interval: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        # ``clock`` and ``sleep`` pace the early refreshes; tests inject a clock of their own.
        self._clock, self._sleep = clock, sleep
        self.store = store
        self.refresh_interval = refresh_interval
        self.miss_interval = miss_interval
        self.usage_interval = usage_interval
        self._live: dict[str, KeyRecord] = {}  # key_hash -> record
        self._revoked: set[str] = set()  # hashes of the keys known revoked: never live again
        self._since: int | None = None  # the highest row version read
        self._last_refresh = 0.0
        self._refreshing: asyncio.Task[None] | None = None
        self._usage: dict[str, tuple[str, datetime]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.refreshes = 0

    # --- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        try:
            await self.refresh()
        except Exception as exc:
            # ClickHouse gone since the worker found it, or its schema not applied yet (a pod
            # started beside the migrate Job): serve anyway; keys not yet read answer 503
            # (resolve), and the periodic refresh reads them once it can.
            log.warning("keys could not be read yet (%s); trying again in the background", exc)
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._every(self.refresh_interval, self.refresh), name="key-refresh"),
            loop.create_task(self._every(self.usage_interval, self.flush_usage), name="key-usage"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self.flush_usage()

    async def _every(self, interval: float, fn: object) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await fn()  # type: ignore[operator]
            except Exception as exc:
                log.warning("%s failed: %s", getattr(fn, "__name__", fn), exc)

    # --- lookups -----------------------------------------------------------------------------
    def cached(self, key_hash: str) -> KeyRecord | None:
        """The live key with this hash as this process knows it now (no refresh, no query)."""
        return self._live.get(key_hash)

    async def resolve(self, key_hash: str) -> KeyRecord | None:
        """The live key with this hash, or None; ``StorageUnavailable`` when it is not known
        here and the keys cannot be read."""
        record = self._live.get(key_hash)
        if record is not None:
            return record
        if key_hash in self._revoked:
            # Revocations are final (apply): a deleted project's trackers that keep sending get
            # their 401 at once, without a refresh to wait for or pay.
            return None
        # Unknown here: perhaps created by another process a moment ago. Wait for the next
        # refresh allowed (at most one per miss interval, shared by every waiting request).
        try:
            await self.refresh(min_age=self.miss_interval)
        except Exception as exc:
            # Not known to be invalid: unknown while the keys cannot be read. 503 (retried by
            # the tracker), not 401 (a key that exists would have its events dropped).
            log.warning("key refresh failed: %s", exc)
            raise StorageUnavailable("the API keys cannot be read") from exc
        return self._live.get(key_hash)

    async def refresh(self, min_age: float = 0.0) -> None:
        """Read key changes since the last refresh, no sooner than ``min_age`` after it.

        Concurrent callers share one query.
        """
        if self._refreshing is None or self._refreshing.done():
            delay = max(0.0, self._last_refresh + min_age - self._clock())
            self._refreshing = asyncio.get_running_loop().create_task(self._refresh(delay))
        await asyncio.shield(self._refreshing)

    async def _refresh(self, delay: float = 0.0) -> None:
        if delay > 0:
            await self._sleep(delay)
        started = self._clock()
        since = None if self._since is None else max(0, self._since - _OVERLAP)
        changes = await asyncio.to_thread(self.store.key_changes, since)
        for record in changes:
            self.apply(record)
            if self._since is None or record.version > self._since:
                self._since = record.version
        self._last_refresh = started
        self.refreshes += 1

    def apply(self, record: KeyRecord) -> None:
        """Take a key's current state into memory (called for this process's own changes too).

        Revocations are final and remembered: the key is dropped at once, whatever the times
        or versions say (a revocation stamped by a clock set back since the key was read), and a
        refresh that read the key before it was revoked and lands after the revocation was
        applied does not bring it back."""
        if record.revoked:
            self._revoked.add(record.key_hash)
            self._live.pop(record.key_hash, None)
        elif record.key_hash not in self._revoked:  # else a stale read of a key revoked since
            current = self._live.get(record.key_hash)
            if current is None or current.version <= record.version:
                self._live[record.key_hash] = record

    def forget(self, key_hash: str) -> None:
        self._live.pop(key_hash, None)

    # --- last use ----------------------------------------------------------------------------
    def touch(self, record: KeyRecord, when: datetime | None = None) -> None:
        self._usage[record.id] = (record.project_id, when or utcnow())

    def pending_usage(self, key_id: str) -> datetime | None:
        entry = self._usage.get(key_id)
        return entry[1] if entry else None

    async def flush_usage(self) -> None:
        if not self._usage:
            return
        usage, self._usage = self._usage, {}
        # Keys revoked meanwhile (a deleted project's, above all) are not written: a deleted
        # project's usage rows must not come back after its rows were deleted.
        live = {record.id for record in self._live.values()}
        usage = {key_id: value for key_id, value in usage.items() if key_id in live}
        if not usage:
            return
        try:
            await asyncio.to_thread(self.store.record_usage, usage)
        except Exception:
            # Put them back unless newer uses arrived meanwhile; they go out with the next flush.
            for key_id, value in usage.items():
                self._usage.setdefault(key_id, value)
            raise

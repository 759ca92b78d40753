"""The ingest log: collect's events are acknowledged once they are on local disk, fsynced.

Layout. ``<data_dir>/log/<n>/`` is a *slot*, owned by one process at a time through an exclusive
``flock`` on its ``lock`` file: each worker claims the first free slot, so a restarted worker
claims a slot again and finds what an earlier process left there. A slot holds *segments*,
``<seq>-<created_ms>.seg``, append-only, each loaded into ClickHouse with one INSERT
(storage/loader.py) and deleted only after that INSERT succeeded.

Stamps. The time in a segment's name is the earliest wall-clock time at which it was begun or any
of its records acknowledged: every event acknowledged before it is loaded (``pending_since``,
the dashboard's ``dataThrough``). The clock may be set back while a segment is open (an NTP
correction): a record acknowledged at an earlier time than the name's renames the segment to
that time before it is acknowledged, and a segment recovered from disk is named by the earliest
of its records' times. Ages (the health endpoint's) are measured on the monotonic clock, from the
wall-clock stamp only for segments recovered from disk.

Records. Every record is framed: ``length (u32) | crc32 (u32) | body``, the body being
``kind (u8) | acknowledge time in ms (i64) | rows (u32) | payload``. The first record of a
segment is its header: JSON with the segment's id (the INSERT's deduplication token) and its
column names, so that a segment written before an upgrade that added columns loads with named
columns, the table's defaults filling the new ones. Every other record is one group commit's rows
as JSONCompactEachRow lines, so a segment's INSERT body is the concatenation of its payloads.

Group commit. Requests hand their encoded rows to :meth:`IngestLog.append` and wait. A flusher
task on the event loop takes everything that arrived, writes it with one ``write`` and one
``fsync`` in a thread, and only then releases the waiters (whose 202 follows). While one fsync
runs, the next group gathers, so requests never pay one fsync each.

Crashes. A process killed mid-append leaves a torn last record: at recovery the first frame that
is short, oversized or fails its checksum ends the segment, the file is cut there and every
complete record before it is kept. A failed write or fsync (a full or broken disk) is undone
(truncated back to the last complete record) and refused: nothing of it is acknowledged.

Damage. A crash tears only the last record: the bad frame runs to the end of the file (or what
follows it is zeros, a filesystem's unwritten blocks). Anything else, a bad frame with bytes
after it or a segment whose header is unreadable but which holds more, is damage (a disk, or a
hand): the records after it may have been acknowledged. Such a file is never cut or deleted
unseen: a copy is kept under ``<data_dir>/log-damaged/`` and an error says how many bytes could
not be read; what is readable before the damage loads. A segment whose file vanished (its
folder deleted) is dropped with an error naming its events; a commit whose file has no name left
is refused, and the slot's folder is made again for the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import os
import re
import struct
import time
import uuid
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from .client import StorageUnavailable

__all__ = [
    "Backlog",
    "IngestLog",
    "LogFull",
    "Segment",
    "encode_rows",
    "frame",
    "pending_segments",
    "pending_since",
    "read_segment",
    "write_segment",
]

log = logging.getLogger("tally.ingestlog")

FRAME = struct.Struct("<II")  # body length, crc32 of the body
RECORD = struct.Struct("<BqI")  # kind, acknowledge time (ms since the epoch), rows
HEADER, ROWS = 1, 2
VERSION = 1
# No record is this large (a group commit of 100-event requests is a few MiB): a length beyond it
# is a torn or damaged frame, not a reason to read gigabytes.
MAX_RECORD = 1 << 30
SEGMENT_NAME = re.compile(r"^(\d{12})-(\d+)\.seg$")
MAX_SLOTS = 4096
# Bytes of rows waiting for the commit in progress (memory, not disk): beyond, collect sheds load.
MAX_PENDING_BYTES = 256 << 20
# At most one "cannot write" line per this many seconds, with the count of the others.
REFUSAL_LOG_EVERY = 10.0

encode_rows = msgspec.json.Encoder().encode_lines
_json = msgspec.json.Encoder()


class LogRefused(StorageUnavailable):
    """The log cannot take events (closed, its slots or commit queue full, its disk failing). It
    logs why where it finds out, so the HTTP layer does not log each refused request again."""


class LogFull(LogRefused):
    """The log is at its disk cap (ClickHouse has not taken the backlog): refuse, retry later."""


# Fault tests only: called at named points; may stop the process there (see app.fault_pause).
Pause = Callable[[str, bool], None]


def _no_pause(point: str, block: bool) -> None:
    return None


def frame(kind: int, ack_ms: int, rows: int, payload: bytes) -> bytes:
    body = RECORD.pack(kind, ack_ms, rows) + payload
    return FRAME.pack(len(body), zlib.crc32(body)) + body


def header_record(segment_id: str, columns: Sequence[str], created_ms: int) -> bytes:
    payload = _json.encode({"v": VERSION, "id": segment_id, "columns": list(columns)})
    return frame(HEADER, created_ms, 0, payload)


@dataclass
class SegmentContents:
    """What a segment file holds, up to its last complete record."""

    segment_id: str | None
    columns: list[str]
    created_ms: int
    records: list[tuple[int, int, bytes]]  # (ack ms, rows, payload)
    good: int  # bytes of complete records (the header included)
    size: int  # bytes in the file
    # Bytes after ``good`` that are not a torn tail: records after the unreadable one may have
    # been acknowledged (see Damage, above).
    damaged: bool = False

    @property
    def events(self) -> int:
        return sum(rows for _, rows, _ in self.records)

    def body(self) -> bytes:
        return b"".join(payload for _, _, payload in self.records)


def read_segment(path: Path, limit: int | None = None) -> SegmentContents:
    """Parse a segment; stop at the first incomplete or damaged frame (a torn tail). With
    ``limit``, only its first ``limit`` bytes: the log's own count of acknowledged ones."""
    data = path.read_bytes()
    if limit is not None:
        data = data[:limit]
    contents = SegmentContents(None, [], 0, [], 0, len(data))
    offset = 0
    while offset + FRAME.size <= len(data):
        length, crc = FRAME.unpack_from(data, offset)
        start, end = offset + FRAME.size, offset + FRAME.size + length
        if length < RECORD.size or length > MAX_RECORD or end > len(data):
            break
        body = data[start:end]
        if zlib.crc32(body) != crc:
            break
        kind, ack_ms, rows = RECORD.unpack_from(body)
        payload = body[RECORD.size :]
        if contents.segment_id is None:
            if kind != HEADER:
                break
            try:
                header = msgspec.json.decode(payload)
                contents.segment_id = str(header["id"])
                contents.columns = [str(c) for c in header["columns"]]
            except (msgspec.DecodeError, KeyError, TypeError):
                break
            contents.created_ms = ack_ms
        elif kind == ROWS:
            contents.records.append((ack_ms, rows, payload))
        else:
            break
        offset = end
        contents.good = end
    contents.damaged = _damaged(data, contents.good)
    return contents


def _damaged(data: bytes, offset: int) -> bool:
    """Whether what follows the last complete record at ``offset`` is more than a torn tail: a
    crash tears the last record only, so its frame runs to the end of the file, or the rest is
    zeros (blocks the filesystem had not written)."""
    rest = memoryview(data)[offset:]
    if len(rest) < FRAME.size or not bytes(rest).strip(b"\0"):
        return False
    length, _ = FRAME.unpack_from(data, offset)
    if not RECORD.size <= length <= MAX_RECORD:
        return True  # a length no record has, with data after it
    if offset + FRAME.size + length < len(data):
        return True  # a whole frame that does not read, with more after it
    # A frame that runs past the end: a tear, unless its length was damaged and a readable
    # record follows (a crash leaves nothing readable after its torn record).
    return _readable_record_after(data, offset + 1)


def _readable_record_after(data: bytes, start: int) -> bool:
    """Whether a complete rows record (its checksum right) begins anywhere from ``start`` on.
    Each rows record's body starts with its kind byte and its payload with ``[``, which rules
    out nearly every position before a checksum is computed."""
    at = data.find(bytes([ROWS]), start + FRAME.size)
    while at != -1:
        begin = at - FRAME.size
        length, crc = FRAME.unpack_from(data, begin)
        end = begin + FRAME.size + length
        if (
            RECORD.size < length <= MAX_RECORD
            and end <= len(data)
            and data[at + RECORD.size] == ord("[")
            and zlib.crc32(memoryview(data)[at:end]) == crc
        ):
            return True
        at = data.find(bytes([ROWS]), at + 1)
    return False


def write_segment(
    path: Path, columns: Sequence[str], rows: Sequence[Sequence[Any]], ack_ms: int | None = None
) -> str:
    """Write a complete segment in one go (tests and tools: a segment as some Tally wrote it)."""
    segment_id = uuid.uuid4().hex
    now = int(time.time() * 1000) if ack_ms is None else ack_ms
    data = header_record(segment_id, columns, now)
    if rows:
        data += frame(ROWS, now, len(rows), encode_rows(list(rows)))
    path.write_bytes(data)
    return segment_id


def pending_segments(root: Path) -> dict[tuple[str, int], int]:
    """The segments waiting in any slot under ``root``: (slot, seq) -> the stamp in its name."""
    found: dict[tuple[str, int], int] = {}
    try:
        slots = list(os.scandir(root))
    except OSError:
        return found
    for slot in slots:
        try:
            names = os.listdir(slot.path)
        except OSError:
            continue
        for name in names:
            match = SEGMENT_NAME.match(name)
            if match:
                key = (slot.name, int(match.group(1)))
                stamp = int(match.group(2))
                found[key] = min(stamp, found.get(key, stamp))
    return found


def pending_since(root: Path) -> int | None:
    """The stamp (ms) of the oldest segment in any slot under ``root``: every event
    acknowledged before it has been loaded. None when no segment waits."""
    return min(pending_segments(root).values(), default=None)


@dataclass
class Segment:
    path: Path
    seq: int
    # The stamp in its name: when it was begun, or the earliest acknowledgement in it when that
    # is earlier (the clock set back meanwhile).
    created_ms: int
    size: int = 0  # bytes of complete records
    events: int = 0
    sealed: bool = False
    # When it was begun on the monotonic clock (for a recovered segment: from its stamp).
    created_mono: float = 0.0
    fd: int = -1
    # Stored in ClickHouse (the loader's INSERT succeeded); only the file's deletion is left.
    loaded: bool = False
    # Found damaged by the loader and said so (once, not at every retry of an outage).
    damage_said: bool = False


@dataclass
class Backlog:
    segments: int
    events: int
    bytes: int
    oldest_ms: int | None
    oldest_age_seconds: float | None = None  # by the monotonic clock; never negative


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _restamp(segment: Segment, stamp_ms: int) -> None:
    """Rename ``segment`` to carry ``stamp_ms``, an earlier time than its name's (the file is
    open for appends or not: a rename keeps the descriptor)."""
    path = segment.path.with_name(f"{segment.seq:012d}-{stamp_ms}.seg")
    os.rename(segment.path, path)
    segment.path, segment.created_ms = path, stamp_ms
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Slot:
    """A claimed log directory: its lock held, its segments known."""

    def __init__(self, path: Path, lock_fd: int) -> None:
        self.path = path
        self.lock_fd = lock_fd
        self.segments: list[Segment] = []

    def release(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.lock_fd)  # closing the descriptor drops the flock


def _try_claim(path: Path) -> Slot | None:
    path.mkdir(parents=True, exist_ok=True)
    fd = os.open(path / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError:
        os.close(fd)
        raise
    return Slot(path, fd)


def _recover(
    slot: Slot,
    wall_ms: Callable[[], int] = _wall_ms,
    monotonic: Callable[[], float] = time.monotonic,
) -> None:
    """Read the segments an earlier process left in ``slot``, cutting torn tails; each is named
    by the earliest of its stamps (its records' times included: it may have been written by a
    Tally that did not rename it when the clock was set back)."""
    found = []
    for name in os.listdir(slot.path):
        match = SEGMENT_NAME.match(name)
        if match:
            found.append((int(match.group(1)), int(match.group(2)), slot.path / name))
    for seq, created_ms, path in sorted(found):
        contents = read_segment(path)
        if contents.segment_id is None:
            if contents.damaged:
                kept = keep_damaged(path, move=True)
                log.error(
                    "segment %s is damaged: its header cannot be read, so none of its %d bytes "
                    "can be loaded; they may hold acknowledged events. The file is kept as %s",
                    path,
                    contents.size,
                    kept,
                )
                continue
            log.warning("removing %s: no complete header (cut while being created)", path)
            path.unlink()
            continue
        if contents.good < contents.size:
            if contents.damaged:
                say_damaged(path, contents, keep_damaged(path))
            else:
                log.warning(
                    "cutting the torn tail of %s at byte %d of %d (a crash mid-append; the cut "
                    "records were never acknowledged)",
                    path,
                    contents.good,
                    contents.size,
                )
            with open(path, "r+b") as fh:
                fh.truncate(contents.good)
                os.fsync(fh.fileno())
        segment = Segment(path, seq, created_ms, contents.good, contents.events, sealed=True)
        earliest = min([created_ms, *(ack for ack, _, _ in contents.records)])
        if contents.created_ms > 0:
            earliest = min(earliest, contents.created_ms)
        if earliest < created_ms:
            _restamp(segment, earliest)
        # Its age so far by the wall clock (all there is), then by the monotonic clock.
        segment.created_mono = monotonic() - max(0.0, (wall_ms() - segment.created_ms) / 1000)
        slot.segments.append(segment)


def keep_damaged(path: Path, move: bool = False) -> Path:
    """Keep a damaged segment file under ``<data_dir>/log-damaged/`` (beside the log's root, so
    that no slot scan takes it), as ``<slot>-<name>.damaged``: copied (the readable part of the
    original loads) or moved (nothing of it can)."""
    folder = path.parent.parent.parent / "log-damaged"
    folder.mkdir(mode=0o700, exist_ok=True)
    kept = folder / f"{path.parent.name}-{path.name}.damaged"
    if move:
        os.replace(path, kept)
    else:
        kept.write_bytes(path.read_bytes())
    with contextlib.suppress(OSError):
        with open(kept, "rb") as fh:
            os.fsync(fh.fileno())
        _fsync_dir(folder)
    return kept


def say_damaged(path: Path, contents: SegmentContents, kept: Path) -> None:
    log.error(
        "segment %s is damaged at byte %d of %d: its %d readable events load, but the %d bytes "
        "after that point cannot be read and may hold acknowledged events, which are not "
        "loaded. The whole file is kept as %s",
        path,
        contents.good,
        contents.size,
        contents.events,
        contents.size - contents.good,
        kept,
    )


class IngestLog:
    """The append side (group commit) and the bookkeeping the loader works from."""

    def __init__(
        self,
        root: Path,
        columns: Sequence[str],
        *,
        cap_bytes: int,
        seal_bytes: int,
        seal_age: float,
        noop: bool = False,
        pause: Pause = _no_pause,
        wall_ms: Callable[[], int] = _wall_ms,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        # The clocks: the wall clock stamps segments and records, the monotonic one measures
        # ages (tests set the wall clock back through ``wall_ms``).
        self.wall_ms, self.monotonic = wall_ms, monotonic
        self.root = root
        self.columns = tuple(columns)
        self.cap_bytes = cap_bytes
        self.seal_bytes = max(1, seal_bytes)
        self.seal_age = max(0.0, seal_age)
        self.noop = noop  # benchmark only: acknowledge without storing
        self._pause = pause
        self.slot: Slot | None = None
        self.adopted: list[Slot] = []
        self._active: Segment | None = None
        self._next_seq = 0
        self._pending: list[bytes] = []
        self._pending_rows = 0
        self._pending_bytes = 0
        self._waiters: list[asyncio.Future[None]] = []
        self._committing = 0  # rows of the group being written (:meth:`settled`)
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        # Set on the event loop when a segment is started or sealed: wakes the loader, which
        # then sleeps until the active segment is due (never set from a thread: not thread-safe).
        self.changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        # The commits' own thread: an fsync never queues behind dashboard queries or an INSERT
        # in the default executor (commits are one at a time anyway, under the lock).
        self._thread: ThreadPoolExecutor | None = None
        # Counters for the health endpoint and tests.
        self.commits = 0
        self.acknowledged = 0
        self.refused = 0  # events refused since start (disk, cap, queue), answered 503
        # Why the last commit failed, until one succeeds: the log cannot be written now.
        self.write_error: str | None = None
        self._at_cap = False
        # Refusals are said at most every REFUSAL_LOG_EVERY seconds (a full disk under load
        # failed hundreds of commits a second, each an ERROR line, onto that same disk).
        self._refusal_logged_at: float | None = None
        self._refused_unsaid = 0
        # The size of the latest commit tried: while write_error is set, the one that failed.
        self._failed_bytes = 0

    # --- slots ---------------------------------------------------------------------------
    def open(self) -> None:
        """Claim a slot and recover what it holds (blocking: run in a thread)."""
        if self.slot is not None or self.noop:
            return
        for n in range(MAX_SLOTS):
            slot = _try_claim(self.root / str(n))
            if slot is not None:
                break
        else:
            raise LogRefused(f"all {MAX_SLOTS} log slots under {self.root} are taken")
        try:
            _recover(slot, self.wall_ms, self.monotonic)
        except OSError:
            slot.release()
            raise
        self.slot = slot
        self._next_seq = max((s.seq for s in slot.segments), default=-1) + 1
        log.info("ingest log: slot %s, %d segment(s) to load", slot.path, len(slot.segments))

    def adopt(self) -> int:
        """Claim the slots no running process holds (left by workers that are gone, e.g. after
        a restart with fewer workers) and take their segments. Blocking: run in a thread."""
        if self.slot is None:
            return 0
        taken = 0
        held = {self.slot.path, *(s.path for s in self.adopted)}
        try:
            entries = sorted(p for p in self.root.iterdir() if p.is_dir())
        except OSError:
            return 0
        for path in entries:
            if path in held:
                continue
            try:
                slot = _try_claim(path)
            except OSError:
                continue
            if slot is None:
                continue
            try:
                _recover(slot, self.wall_ms, self.monotonic)
            except OSError as exc:
                log.warning("cannot recover %s: %s", path, exc)
                slot.release()
                continue
            if slot.segments:
                self.adopted.append(slot)
                taken += len(slot.segments)
                log.info("ingest log: adopted %s with %d segment(s)", path, len(slot.segments))
            else:
                slot.release()
        return taken

    # --- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tally-log")
            self._task = asyncio.get_running_loop().create_task(self._run(), name="tally-log")

    async def stop(self) -> None:
        """Commit what is waiting, refuse new appends, seal the active segment."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
            self._task = None
        await self.seal(force=True)
        if self._thread is not None:
            self._thread.shutdown(wait=False)
            self._thread = None

    def close(self) -> None:
        for slot in [*self.adopted, *([self.slot] if self.slot else [])]:
            slot.release()
        self.adopted = []
        self.slot = None

    # --- request side --------------------------------------------------------------------
    async def append(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Return once ``rows`` are on disk, fsynced; raise StorageUnavailable (LogFull at the
        cap) otherwise, with nothing of them acknowledged."""
        if self.noop:
            return
        if self._closing or self._task is None:
            self.refused += len(rows)
            raise LogRefused("the ingest log is closed")
        payload = encode_rows(rows)
        size = FRAME.size + RECORD.size + len(payload)
        if self.stored_bytes + self._pending_bytes + size > self.cap_bytes:
            self.refused += len(rows)
            if not self._at_cap:
                self._at_cap = True
                log.warning(
                    "ingest log: at its disk cap (%.0f MB) while ClickHouse has not taken the "
                    "backlog; collect answers 503 until it does",
                    self.cap_bytes / (1 << 20),
                )
            raise LogFull("the ingest log is at its disk cap")
        if self._at_cap:
            self._at_cap = False
            log.info("ingest log: below its disk cap again; collect acknowledges again")
        if self._pending_bytes + size > MAX_PENDING_BYTES:
            self.refused += len(rows)
            raise LogRefused("the ingest log's commit queue is full")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append(payload)
        self._pending_rows += len(rows)
        self._pending_bytes += size
        self._waiters.append(future)
        self._wake.set()
        # Not shielded (one future and two callbacks less per request): a client that goes away
        # cancels only this waiter, which the flusher then skips; its rows are already in the
        # group and are committed with it.
        await future

    async def settled(self) -> None:
        """Return once every row appended so far is written to a segment (or refused): what
        an append already under way would add to the log is in a segment then, and a segment
        begun before the caller's next clock reading (project deletion, http/controllers.py)."""
        while self._pending or self._committing:
            await asyncio.sleep(0.005)

    # --- flusher -------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._waiters:
                if self._closing:
                    return
                continue
            payloads, rows, waiters = self._pending, self._pending_rows, self._waiters
            self._pending, self._pending_rows, self._pending_bytes = [], 0, 0
            self._waiters = []
            self._committing = rows
            error: BaseException | None = None
            async with self._lock:
                active = self._active
                try:
                    await asyncio.get_running_loop().run_in_executor(
                        self._thread, self._commit, payloads, rows
                    )
                except Exception as exc:
                    error = exc
                finally:
                    self._committing = 0
                if self._active is not active:  # a segment was started or sealed
                    self.changed.set()
            if error is None:
                self.commits += 1
                self.acknowledged += rows
                if self.write_error is not None:
                    self.write_error = None
                    log.info("ingest log: writing again")
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)
            else:
                self.refused += rows
                self.write_error = str(error)
                self._say_refusal(rows, error)
                unavailable = (
                    error
                    if isinstance(error, StorageUnavailable)
                    else LogRefused(f"ingest log: {error}")
                )
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_exception(unavailable)
            if self._waiters or self._closing:
                self._wake.set()

    def recheck(self) -> None:
        """After a failed commit, and none since: whether the slot's disk takes a write again
        (a small file written, fsynced and deleted), so that a quiet site's health check does not
        stay failed until its next event. Blocking: run in a thread."""
        if self.write_error is None:
            return
        try:
            if self.slot is None:
                self.open()  # a start that could not open the log
            probe = self._slot_folder() / ".probe"
            # As large as the commit that failed: a nearly full disk takes a small write.
            size = min(max(4096, self._failed_bytes), 8 << 20)
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                if os.write(fd, bytes(size)) != size:
                    raise OSError(errno.ENOSPC, "short write")
                os.fsync(fd)
            finally:
                os.close(fd)
                with contextlib.suppress(OSError):
                    probe.unlink()
        except (OSError, LogRefused) as exc:
            self.write_error = str(exc)
            return
        self.write_error = None
        log.info("ingest log: writing again (a test write succeeded)")

    async def recheck_async(self) -> None:
        """:meth:`recheck` on the commits' own thread, so that it never runs beside one."""
        if self._thread is None:
            return await asyncio.to_thread(self.recheck)
        await asyncio.get_running_loop().run_in_executor(self._thread, self.recheck)

    def _say_refusal(self, rows: int, error: BaseException) -> None:
        now = self.monotonic()
        last = self._refusal_logged_at
        if last is not None and now - last < REFUSAL_LOG_EVERY:
            self._refused_unsaid += rows
            return
        more = self._refused_unsaid
        self._refusal_logged_at, self._refused_unsaid = now, 0
        log.error(
            "ingest log: cannot write %d events: %s%s",
            rows,
            error,
            f" ({more} more events refused since the last such line)" if more else "",
        )

    def _commit(self, payloads: list[bytes], rows: int) -> None:
        """One write and one fsync for a whole group (in a thread, under the lock)."""
        segment = self._active or self._new_segment()
        ack_ms = self.wall_ms()
        data = frame(ROWS, ack_ms, rows, b"".join(payloads))
        self._failed_bytes = len(data)  # until it succeeds
        start = segment.size
        try:
            view = memoryview(data)
            half = len(data) // 2
            written = 0
            while written < len(data):
                chunk = view[written:half] if written < half else view[written:]
                n = os.write(segment.fd, chunk)
                if n == 0:
                    raise OSError(errno.ENOSPC, "no space left on the log's disk")
                written += n
                if written >= half and written - n < half:
                    self._pause("mid_append", True)
            os.fsync(segment.fd)
            if os.fstat(segment.fd).st_nlink == 0:
                # Its folder (or the file) was deleted: fsynced, but to a file nobody can read.
                raise OSError(errno.ENOENT, f"{segment.path} was deleted while in use")
            # The clock set back since the segment was begun: its name must not claim these
            # rows were acknowledged after a time they were acknowledged before.
            earliest = min(ack_ms, self.wall_ms())
            if earliest < segment.created_ms:
                _restamp(segment, earliest)
        except OSError:
            # Undo: the file ends with its last complete record again. If even that fails, the
            # segment is sealed at that length: the loader reads no further (``segment.size``),
            # and cuts the file there before it loads it (the refused record may be complete, and
            # a client told 503 sends it again).
            try:
                os.ftruncate(segment.fd, start)
                os.fsync(segment.fd)
            except OSError:
                pass
            self._rescue_unlinked(segment, start)
            if segment.events == 0:
                self._drop_active()  # only its header: not left to fill a failing disk
            else:
                self._seal_active()
            raise
        segment.size += len(data)
        segment.events += rows
        self._pause("after_fsync", True)
        if segment.size >= self.seal_bytes:
            self._seal_active()

    def _new_segment(self) -> Segment:
        if self.slot is None:
            self.open()
        assert self.slot is not None
        created_ms = self.wall_ms()
        seq = self._next_seq
        path = self._slot_folder() / f"{seq:012d}-{created_ms}.seg"
        header = header_record(uuid.uuid4().hex, self.columns, created_ms)
        # Readable too: a segment deleted while open is written again from it (_rescue_unlinked).
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        try:
            if os.write(fd, header) != len(header):
                raise OSError(errno.ENOSPC, "short write of a segment header")
            os.fsync(fd)
            _fsync_dir(self.slot.path)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                path.unlink()
            raise
        self._next_seq = seq + 1
        segment = Segment(path, seq, created_ms, len(header), created_mono=self.monotonic(), fd=fd)
        self.slot.segments.append(segment)
        self._active = segment
        return segment

    def _rescue_unlinked(self, segment: Segment, size: int) -> None:
        """A segment whose file was deleted while open (its folder removed by hand) still holds
        its acknowledged records behind the open descriptor: they are written again under its
        name, in its folder made again, before the descriptor is closed."""
        try:
            if os.fstat(segment.fd).st_nlink > 0 or self.slot is None:
                return
            data = os.pread(segment.fd, size, 0)
            self._slot_folder()
            fd = os.open(segment.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            _fsync_dir(segment.path.parent)
            log.error(
                "ingest log: %s was deleted while in use; its %d acknowledged events were "
                "written again from the open file",
                segment.path,
                segment.events,
            )
        except OSError as exc:
            log.error("ingest log: cannot write %s again: %s", segment.path, exc)

    def _slot_folder(self) -> Path:
        """This process's slot folder, made again if it was deleted under this process, with a
        new lock file, locked (the old lock was on a file no other process can open)."""
        slot = self.slot
        assert slot is not None
        if not slot.path.is_dir():
            log.error("ingest log: %s was deleted while in use; making it again", slot.path)
            again = _try_claim(slot.path)
            if again is None:
                raise OSError(errno.EBUSY, f"{slot.path} was deleted and another process took it")
            slot.release()
            slot.lock_fd = again.lock_fd
        return slot.path

    def _drop_active(self) -> None:
        """Delete the active segment, which holds no event, without sealing it: the loader
        (which takes sealed segments) never sees it."""
        segment = self._active
        assert segment is not None and self.slot is not None
        self._active = None
        self.slot.segments.remove(segment)
        with contextlib.suppress(OSError):
            os.close(segment.fd)
        segment.fd = -1
        with contextlib.suppress(OSError):
            segment.path.unlink()

    def _seal_active(self) -> None:
        segment = self._active
        if segment is None:
            return
        self._active = None
        segment.sealed = True
        with contextlib.suppress(OSError):
            os.close(segment.fd)
        segment.fd = -1

    # --- loader side ---------------------------------------------------------------------
    def seal_due_in(self) -> float | None:
        """Seconds until the active segment is old enough to seal; None without one."""
        if self._active is None:
            return None
        return max(0.0, self._active.created_mono + self.seal_age - self.monotonic())

    def active_key(self) -> tuple[str, int] | None:
        """The active segment as :func:`pending_segments` names it; None without one."""
        active = self._active
        return None if active is None else (active.path.parent.name, active.seq)

    async def seal(self, force: bool = False) -> None:
        """Seal the active segment if it is old enough (or ``force``)."""
        async with self._lock:
            due = self.seal_due_in()
            if due is not None and (force or due <= 0):
                self._seal_active()
                self.changed.set()

    def sealed(self) -> list[Segment]:
        """Sealed segments, oldest first (adopted slots' first: they are older)."""
        out = [s for slot in self.adopted for s in slot.segments]
        if self.slot is not None:
            out += [s for s in self.slot.segments if s.sealed]
        return out

    @staticmethod
    def cut_to_size(segment: Segment) -> None:
        """Cut bytes after the segment's acknowledged ones: a refused commit whose undo failed
        (blocking: run in a thread). Best effort: the loader reads only ``segment.size`` bytes
        anyway; this keeps a restart, which reads the whole file, from loading them."""
        try:
            if os.stat(segment.path).st_size <= segment.size:
                return
            with open(segment.path, "r+b") as fh:
                fh.truncate(segment.size)
                os.fsync(fh.fileno())
            log.warning(
                "ingest log: cut %s after its %d acknowledged bytes (a refused commit's undo had "
                "failed)",
                segment.path,
                segment.size,
            )
        except OSError:
            pass  # FileNotFoundError is the loader's to report; a failing disk, its retry's

    @staticmethod
    def delete_file(segment: Segment) -> None:
        """Delete a segment whose rows are stored (blocking: run in a thread)."""
        segment.path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            _fsync_dir(segment.path.parent)

    def forget(self, segment: Segment) -> None:
        """Drop a deleted segment from the bookkeeping (on the event loop)."""
        for slot in [*([self.slot] if self.slot else []), *self.adopted]:
            if segment in slot.segments:
                slot.segments.remove(segment)
        for slot in list(self.adopted):
            if not slot.segments:
                self.adopted.remove(slot)
                slot.release()

    def _all(self) -> list[Segment]:
        out = [s for slot in self.adopted for s in slot.segments]
        if self.slot is not None:
            out += self.slot.segments
        return out

    @property
    def stored_bytes(self) -> int:
        return sum(s.size for s in self._all())

    def data_through_ms(self) -> int:
        """A time before which every acknowledged event is loaded (readable): the stamp of the
        oldest segment not yet loaded, in any slot of this data folder (its earliest
        acknowledgement when the clock was set back meanwhile), else now. This process's own
        segments count from when they were begun by the monotonic clock too: after a clock that
        ran fast was set right, a segment begun seconds ago is stamped in the future, and
        min(now, stamp) claimed its events (acknowledged before now) while none was loaded."""
        now = self.wall_ms()
        if self.noop:
            return now
        oldest = pending_since(self.root)
        through = now if oldest is None else min(now, oldest)
        begun = min((s.created_mono for s in self._all()), default=None)
        if begun is not None:
            through = min(through, now - int(max(0.0, self.monotonic() - begun) * 1000))
        return through

    def backlog(self) -> Backlog:
        segments = self._all()
        waiting = [s for s in segments if s.events]
        begun = min((s.created_mono for s in waiting), default=None)
        return Backlog(
            segments=len(segments),
            events=sum(s.events for s in segments),
            bytes=sum(s.size for s in segments),
            oldest_ms=min((s.created_ms for s in waiting), default=None),
            oldest_age_seconds=None if begun is None else max(0.0, self.monotonic() - begun),
        )

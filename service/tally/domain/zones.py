"""Time zones as the storage engine reads them.

A window's bounds are computed here, in Python (a local midnight as a UTC instant), and its events
are put in local days and hours by ClickHouse (``toDate(occurred_at, tz)``). Both must read the
same zone rules: Python's ``zoneinfo`` reads the system's tz database (Debian 12 ships 2025b),
the engine carries its own, and the two disagree for zones whose rules changed in between
(Vancouver, Edmonton, Casablanca, Winnipeg, Havana: one zone database said -07:00 where the other
said -06:00). One answer then counted a day's events in one zone definition and its hours in the
other, and "today" read empty for an hour a day.

So the engine is the one source of truth: ``use(offsets)`` installs a function that asks it for
a zone's UTC offset transitions (storage/zones.py), and :func:`zone` builds from them a
:class:`EngineZone`, a ``tzinfo`` that Python's datetime arithmetic uses like any other. Until one
is installed (pure-Python callers, unit tests), or when the engine does not know a zone, Python's
``zoneinfo`` answers. Pure Python, no storage."""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

log = logging.getLogger("tally.zones")

# The instants the engine's rules are read for, as UTC seconds: every date an event can carry
# (none before 1970) up to 2100. Beyond, Python's rules answer (no event is stored there).
FIRST_SECOND = -86_400 * 31  # 1969-12-01
LAST_SECOND = 4_102_444_800  # 2100-01-01

# What an engine lookup returns for a zone: the offset (seconds) in force at FIRST_SECOND and each
# later change as (UTC second it takes effect, new offset in seconds), in time order.
Offsets = tuple[int, Sequence[tuple[int, int]]]
OffsetSource = Callable[[str], Offsets]


class EngineZone(tzinfo):
    """A ``tzinfo`` from a list of UTC offset transitions (the engine's), with the semantics of
    ``zoneinfo`` (PEP 495): a local time in a gap (clocks jump forward) with ``fold=0`` takes the
    offset before the jump, and with ``fold=1`` the one after; a repeated local time takes the
    earlier offset with ``fold=0`` and the later with ``fold=1``. Outside
    [FIRST_SECOND, LAST_SECOND) the ``fallback`` zone answers."""

    def __init__(self, key: str, offsets: Offsets, fallback: tzinfo) -> None:
        first, changes = offsets
        self.key = key
        self._fallback = fallback
        self._utc = [t for t, _ in changes]
        # _offsets[i]: the offset in force before change i (i < n) or after the last (i = n).
        self._offsets = [first, *(o for _, o in changes)]
        # The local wall time (seconds) at which each change happens, for fold 0 and fold 1: a
        # change from offset a to b is at t + max(a, b) for fold 0 and t + min(a, b) for fold 1.
        self._wall: tuple[list[int], list[int]] = ([], [])
        for i, t in enumerate(self._utc):
            before, after = self._offsets[i], self._offsets[i + 1]
            self._wall[0].append(t + max(before, after))
            self._wall[1].append(t + min(before, after))

    def __repr__(self) -> str:
        return f"EngineZone({self.key!r})"

    def __str__(self) -> str:
        return self.key

    @staticmethod
    def _seconds(dt: datetime) -> int:
        """``dt``'s wall time as seconds since 1970-01-01 00:00 of the same wall clock."""
        naive = dt.replace(tzinfo=None, fold=0)
        return (naive - datetime(1970, 1, 1)) // timedelta(seconds=1)

    def _outside(self, seconds: int) -> bool:
        return not FIRST_SECOND + 86_400 <= seconds < LAST_SECOND - 86_400

    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        if dt is None:
            return None
        wall = self._seconds(dt)
        if self._outside(wall):
            return self._fallback.utcoffset(dt)
        i = bisect.bisect_right(self._wall[dt.fold], wall)
        return timedelta(seconds=self._offsets[i])

    def dst(self, dt: datetime | None) -> timedelta | None:
        return None  # the engine says the offset, not which part of it is daylight saving

    def tzname(self, dt: datetime | None) -> str | None:
        offset = self.utcoffset(dt)
        if offset is None:
            return None
        seconds = int(offset.total_seconds())
        sign, seconds = ("-" if seconds < 0 else "+"), abs(seconds)
        return f"{sign}{seconds // 3600:02d}{seconds % 3600 // 60:02d}"

    def fromutc(self, dt: datetime) -> datetime:
        if not isinstance(dt, datetime) or dt.tzinfo is not self:
            raise ValueError("fromutc: dt.tzinfo is not self")
        utc = self._seconds(dt)
        if self._outside(utc):
            local = dt.replace(tzinfo=UTC).astimezone(self._fallback)
            return local.replace(tzinfo=self)
        i = bisect.bisect_right(self._utc, utc)
        local = dt + timedelta(seconds=self._offsets[i])
        # The second pass through a repeated hour (clocks set back by change i - 1) is fold 1.
        back = self._offsets[i - 1] - self._offsets[i] if i > 0 else 0
        if back > 0 and utc < self._utc[i - 1] + back:
            local = local.replace(fold=1)
        return local


_lock = threading.Lock()
# The sources installed, the latest last: the one in use. Every app of a process installs its own
# on start and releases it on stop (tests run several apps at once, all on one engine).
_sources: list[OffsetSource] = []
_zones: dict[str, tzinfo] = {}
_warned: set[str] = set()  # zones the engine failed to read, said once


def _current() -> OffsetSource | None:
    return _sources[-1] if _sources else None


def use(source: OffsetSource) -> None:
    """Read zone rules from ``source`` (the engine's, storage/zones.py) until it is released.
    Zones already built are dropped."""
    with _lock:
        _sources.append(source)
        _zones.clear()


def release(source: OffsetSource) -> None:
    """Stop reading zone rules from ``source``: the source installed before it is used again
    (Python's ``zoneinfo`` when there is none). Releasing a source not in use does nothing."""
    with _lock:
        if source in _sources:
            was = _current()
            _sources.remove(source)
            if _current() is not was:
                _zones.clear()


def python_zone(name: str) -> ZoneInfo:
    """Python's own rules for ``name``; ValueError when there is no zone by that name."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise ValueError(f"unknown time zone {name!r}") from error


def zone(name: str) -> tzinfo:
    """The zone ``name`` as the storage engine reads it (Python's rules until an engine source
    is installed, or when the engine fails to read it); ValueError for an unknown name."""
    found = _zones.get(name)
    if found is not None:
        return found
    fallback = python_zone(name)
    source = _current()
    if source is None:
        return fallback
    try:
        built: tzinfo = EngineZone(name, source(name), fallback)
    except Exception as exc:
        # Not kept: a ClickHouse server that did not answer this once is asked again by the
        # next request (kept, the zone would have Python's rules until a restart). Said once.
        if name not in _warned:
            _warned.add(name)
            log.warning(
                "the storage engine could not read time zone %s (%s); Python's rules "
                "for it are used until it can, which may place day boundaries differently",
                name,
                exc,
            )
        return fallback
    with _lock:
        if _current() is source:
            _zones[name] = built
    return built

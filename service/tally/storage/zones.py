"""A zone's UTC offset transitions as the storage engine reads them (domain/zones.py says why).

ClickHouse gives a zone's offset at an instant (``timeZoneOffset``), not its list of changes, so
the changes are found by sampling: every 12 hours from FIRST_SECOND to LAST_SECOND, then every
minute and every second inside each 12-hour step where the offset changed. Three queries per zone,
once per process (a zone whose offset changed twice within 12 hours would be missed; none has
since 1970)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import pairwise

from ..domain.zones import FIRST_SECOND, LAST_SECOND, Offsets
from .client import Storage

STEPS = (43_200, 60, 1)  # seconds between samples, coarse to fine
# A zone name as IANA writes them (the SQL quotes it; this keeps anything else out).
ZONE_NAME = re.compile(r"[A-Za-z0-9_+\-]+(/[A-Za-z0-9_+\-]+)*")


def _changes(storage: Storage, name: str, spans: Sequence[tuple[int, int]], step: int):
    """The offset at the start of the first span, and each ``(second, new offset)`` where the
    offset differs from the sample ``step`` seconds before it, sampling each span [a, b]."""
    starts = ", ".join(str(a) for a, _ in spans)
    counts = ", ".join(str((b - a) // step + 1) for a, b in spans)
    sql = f"""
        WITH arrayFlatten(arrayMap((a, n) -> arrayMap(i -> a + i * {step}, range(n)),
                                   [{starts}], [{counts}])) AS ts,
             arrayMap(t -> timeZoneOffset(toDateTime64(t, 0, '{name}')), ts) AS os
        SELECT os[1],
               arrayFilter((t, p, o, q) -> o != p AND t - q = {step},
                           arrayPopFront(ts), arrayPopBack(os), arrayPopFront(os),
                           arrayPopBack(ts)),
               arrayFilter((o, p, t, q) -> o != p AND t - q = {step},
                           arrayPopFront(os), arrayPopBack(os), arrayPopFront(ts),
                           arrayPopBack(ts))"""
    first, seconds, offsets = storage.query(sql)[0]
    return int(first), list(zip(map(int, seconds), map(int, offsets), strict=True))


def engine_offsets(storage: Storage, name: str) -> Offsets:
    """``name``'s offset at FIRST_SECOND and its changes until LAST_SECOND, as the engine that
    stores the events reads them. ValueError for a name that is not a zone's."""
    if not ZONE_NAME.fullmatch(name):
        raise ValueError(f"not a time zone name: {name!r}")
    first, found = _changes(storage, name, [(FIRST_SECOND, LAST_SECOND)], STEPS[0])
    for coarse, fine in pairwise(STEPS):
        if not found:
            break
        # Each change lies after the sample before it (``coarse`` seconds earlier).
        _, found = _changes(storage, name, [(t - coarse, t) for t, _ in found], fine)
    return first, found


def zones_in_use(storage: Storage) -> list[str]:
    """The zones of the projects stored (to read their rules before a request asks)."""
    rows = storage.query(f"SELECT DISTINCT timezone FROM {storage.database}.projects FINAL")
    return sorted(str(name) for (name,) in rows)

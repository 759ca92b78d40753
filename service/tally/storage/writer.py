"""How event rows are written to ``events``: their columns and the INSERT that stores them.

Collect appends rows to the ingest log (storage/ingestlog.py) and acknowledges them once they are
on disk; the loader (storage/loader.py) stores each sealed segment with one INSERT made here,
whose ``insert_deduplication_token`` names the segment, so loading it again after a crash stores
nothing twice (the events table and every rollup deduplicate on the token).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from .client import Storage, StorageUnavailable
from .dedup_log import uncommitted_blocks

__all__ = [
    "EVENT_COLUMNS",
    "INSERT_SETTINGS",
    "LOGGED_COLUMNS",
    "StaleDeduplication",
    "StorageUnavailable",
    "events_inserter",
    "segment_inserter",
]

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

# The ingest log's rows (domain/events.py's to_rows): the event's id as well, given when Tally
# accepts it, so that a segment loaded again gives every table the same ids. Segments written
# before it was logged load without it, the table's generateUUIDv4() giving one.
LOGGED_COLUMNS: tuple[str, ...] = (*EVENT_COLUMNS, "event_id")

# In cluster mode the session adds storage.client.CLUSTER_SETTINGS to these: the INSERT into the
# Distributed ``events`` returns only once every shard stored its rows, and the token below
# reaches each shard's replicated tables, so a retry is deduplicated there.
INSERT_SETTINGS: dict[str, Any] = {
    "async_insert": 0,
    "insert_deduplicate": 1,
    "deduplicate_blocks_in_dependent_materialized_views": 1,
    # Events of one batch may span many months; one old event must not fail everyone's batch.
    "throw_on_max_partitions_per_insert_block": 0,
    # The rollup views of one INSERT run side by side rather than one after another: ~10-15%
    # less time per INSERT measured here (on a server; the embedded engine overrides it below).
    "parallel_view_processing": 1,
}

# The embedded engine runs the loader's INSERT in the worker process, on the cores that answer
# collect requests: since collect acknowledges on the ingest log, not on the INSERT, the INSERT
# must not take every core from the HTTP stack. One thread (parsing, then the views one after
# another) leaves the other core to it. Not a lower CPU priority as well (ClickHouse's
# ``os_thread_priority``, nice 19: tried, a little better in short runs): under a load that keeps
# every core busy a nice-19 loader gets almost no CPU, its backlog grows for as long as the load
# lasts, and at the log's disk cap collect answers 503: a busy site would lose availability to
# win a benchmark. At normal priority the loader keeps its share and its one-second rhythm.
# Measured on the 2-core machine (benchmarks/README.md, issue 14): single events at 16
# connections 5,108-5,311 requests/s against 2,854-4,389 before (with nice 19 then).
EMBEDDED_INSERT_SETTINGS: dict[str, Any] = {
    "max_threads": 1,
    "max_insert_threads": 1,
    "max_parsing_threads": 1,
    "input_format_parallel_parsing": 0,
    "parallel_view_processing": 0,
}


InsertFn = Callable[[list[tuple[Any, ...]], str], None]


class StaleDeduplication(Exception):
    """An INSERT failed in the embedded engine after a table recorded its block and before it
    stored it (a rename refused by a failing disk): the engine now takes that block for stored,
    and drops the INSERT again as a duplicate, until it is opened again (storage/dedup_log.py
    then forgets the record)."""


def sync_to_disk(path: str) -> None:
    """Make what the embedded engine wrote under ``path`` durable: ``syncfs`` of its filesystem
    (``sync`` where there is none). The engine does not fsync a part it writes (its
    ``fsync_after_insert`` is off, and is a table setting, not an INSERT's), and the loader
    deletes a segment, durably, once its INSERT returns: a power cut or a kernel crash after that
    could keep the deletion and lose the part, with the events it acknowledged. Raises
    StorageUnavailable when the disk cannot (the segment stays, and its INSERT is retried, which
    stores nothing twice)."""
    if not hasattr(os, "O_DIRECTORY") or _SYNCFS is None:
        os.sync()
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if _SYNCFS(fd) != 0:
            error = ctypes.get_errno()
            raise StorageUnavailable(f"cannot sync the engine's data to disk: {os.strerror(error)}")
    finally:
        os.close(fd)


def _libc_syncfs() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.syncfs  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


_SYNCFS = _libc_syncfs()


def segment_inserter(
    storage: Storage, fault_file: str = "", *, loader: bool = True
) -> Callable[[Sequence[str], bytes, str], None]:
    """The insert function of the loader: rows already encoded as JSONCompactEachRow lines
    (a segment's body), into the named columns, deduplicated on ``token``. ``loader`` (the
    default) runs it as background work with the embedded engine (EMBEDDED_INSERT_SETTINGS);
    tools and benchmarks that time INSERTs themselves pass False.

    ``fault_file`` is for fault tests only: while that file exists and says ``fail``, every
    INSERT fails; when it says ``lose``, every INSERT succeeds but its answer is lost (raises
    afterwards), so the loader retries an INSERT that was in fact stored.
    """
    table = f"{storage.database}.events"
    background = EMBEDDED_INSERT_SETTINGS if loader and storage.target.kind == "chdb" else {}

    def insert(columns: Sequence[str], body: bytes, token: str) -> None:
        fault = _fault(fault_file)
        if fault == "fail":
            raise StorageUnavailable("injected fault: insert refused")
        # One JSON array per row, encoded by msgspec in C and parsed by ClickHouse in C++ (which
        # releases the GIL): the Python side of an INSERT costs well under a microsecond per
        # event. A Native block built by clickhouse-connect in Python cost ~6 µs per event, all
        # of it under the GIL that the HTTP side needs.
        try:
            storage.raw_insert(
                table,
                columns,
                body,
                fmt="JSONCompactEachRow",
                settings={**INSERT_SETTINGS, **background, "insert_deduplication_token": token},
            )
        except Exception as exc:
            if storage.target.kind == "chdb" and (stale := uncommitted_blocks(storage.target.path)):
                raise StaleDeduplication(
                    f"the embedded engine recorded blocks it did not store ({', '.join(stale)})"
                ) from exc
            raise
        if loader and storage.target.kind == "chdb":
            sync_to_disk(storage.target.path)
        if fault == "lose":
            raise StorageUnavailable("injected fault: answer lost after the insert")

    return insert


def events_inserter(storage: Storage, fault_file: str = "") -> InsertFn:
    """Rows in the order of EVENT_COLUMNS, stored with one INSERT (tools, tests, benchmarks)."""
    insert = segment_inserter(storage, fault_file, loader=False)

    def insert_rows(rows: list[tuple[Any, ...]], token: str) -> None:
        insert(EVENT_COLUMNS, _encode_lines(rows), token)

    return insert_rows


_encode_lines = msgspec.json.Encoder().encode_lines


def _fault(path: str) -> str:
    if not path:
        return ""
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return ""

"""A project's raw events in a range, in a file format ClickHouse writes itself, as a stream of
chunks: memory stays flat whatever the size of the export.

CSV and NDJSON (JSONEachRow) stream block by block from the engine, on a server (HTTP) and on
the embedded engine alike (clickhouse-connect's ``raw_stream``), made as they are read: a server's
response waits on TCP, the embedded engine makes a block when the last was fetched, in blocks of
EMBEDDED_SETTINGS' rows. Parquet has a footer, so a chunk per block does not make one file: a
server streams it whole over HTTP, and the embedded engine, whose streaming API hands out each
block as a file of its own, writes it to a temporary file (``INTO OUTFILE``, row group by row
group, so its memory is bounded) that is then streamed.

Every call of :func:`chunks` must come from one thread (the embedded engine's stream belongs to
the thread that opened it); :func:`cancel` may come from any other.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from ..supervision import process_alive
from .client import Storage, StorageUnavailable, _unavailable_on_failure

log = logging.getLogger("tally.export")

# Bytes handed to the HTTP layer at a time.
CHUNK_BYTES = 1 << 20

# format parameter -> (ClickHouse output format, media type, file extension)
FORMATS: dict[str, tuple[str, str, str]] = {
    "csv": ("CSV", "text/csv", "csv"),
    "ndjson": ("JSONEachRow", "application/x-ndjson", "ndjson"),
    "parquet": ("Parquet", "application/vnd.apache.parquet", "parquet"),
}

# Times in the text formats as every time Tally gives out (CONTRACT.md): ISO 8601 UTC with
# milliseconds and Z, 2026-11-27T01:25:48.417Z, rather than the engine's 2026-11-27 01:25:48.417.
ISO_TIMES = {"date_time_output_format": "'iso'"}
FORMAT_SETTINGS: dict[str, dict[str, Any]] = {
    "csv": ISO_TIMES,
    # "/" stays "/" (JSON allows it unescaped, and paths and URLs are full of them).
    "ndjson": {"output_format_json_escape_forward_slashes": 0, **ISO_TIMES},
    # Row groups small enough that the writer holds little at a time, large enough to compress;
    # encoded one at a time: parallel encoding holds a row group per thread. The 1M-event export
    # of tests/test_export_memory.py (run with -s) grew the server by 128 to 207 MB with it, by
    # 80 to 154 MB (most near 100) without; it takes 2.5 s rather than 2.0 s.
    "parquet": {
        "output_format_parquet_row_group_size": 65536,
        "output_format_parquet_row_group_size_bytes": 32 * 1024 * 1024,
        "output_format_parquet_parallel_encoding": 0,
    },
}

# Columns that never leave: anything holding a hash of a secret (API keys are stored as hashes
# in api_keys, not in events; the rule keeps it so if a column like that is ever added).
_SECRET_COLUMN = re.compile(r"hash", re.IGNORECASE)
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# The embedded engine's stream waits for its reader (a block is made when the previous one was
# fetched), but a block is as many rows as max_block_size, whatever their bytes, and reading
# several parts oldest first merges them into blocks of the default 65,409 rows: over 100 MB of
# CSV or JSON each, several of them held at a time (a slow download of a 300k-event project grew
# the server by about 800 MB, three by 2.3 GB). Blocks of 1,024 rows are 1 to 2 MB of typical
# events; the reading-in-order buffer (read_in_order_use_buffering) would read ahead of them.
# Parquet's INTO OUTFILE reads with them too (a 300k-event file grew a process by 0 to 11 MB
# with them, 160 to 316 MB without). Rows of one millisecond come in the engine's order.
EMBEDDED_SETTINGS: dict[str, int] = {"max_block_size": 1024, "read_in_order_use_buffering": 0}

# The UTC days an event can be stored on (DateTime64's range; its last day is not whole).
FIRST_DAY = date(1970, 1, 1)
LAST_DAY = date(2299, 12, 30)


@dataclass(frozen=True)
class ExportSpec:
    """One export: the project, the UTC days ``first``..``last`` (inclusive, as asked: they may
    reach past the days anything is stored on), the format."""

    project_id: str
    first: date
    last: date
    fmt: str  # a key of FORMATS
    hide_ip: bool
    # The query's log_comment is "tally-export <marker>": it is found (and killed) by it.
    marker: str = field(default_factory=lambda: uuid.uuid4().hex)
    # Set by cancel(): a query not started yet never starts.
    stopped: threading.Event = field(default_factory=threading.Event, compare=False)

    @property
    def comment(self) -> str:
        return f"tally-export {self.marker}"

    @property
    def start(self) -> datetime:
        """00:00 UTC of ``first``, within the stored days."""
        return _midnight(min(max(self.first, FIRST_DAY), LAST_DAY + timedelta(days=1)))

    @property
    def end(self) -> datetime:
        """Exclusive: 00:00 UTC of the day after ``last``, within the stored days. The range is
        cut to them as one interval, so a range wholly outside them is empty (``end`` is then
        ``start``), never their first or last day."""
        after = min(max(self.last, FIRST_DAY - timedelta(days=1)), LAST_DAY) + timedelta(days=1)
        return max(_midnight(after), self.start)

    @property
    def filename(self) -> str:
        ext = FORMATS[self.fmt][2]
        return f"tally-{self.project_id}-{self.first.isoformat()}-{self.last.isoformat()}.{ext}"


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(0), tzinfo=UTC)


def columns(storage: Storage, hide_ip: bool) -> list[str]:
    """Every stored column of ``events``, in table order, read from the engine so that columns
    added by later schema files come along; ``ip`` left out when ``hide_ip``, hashes never. The
    columns ``SELECT *`` gives: the engine's own MATERIALIZED keys (schema 009's session_key and
    visitor_hash, computed from exported columns) are not part of an event's record."""
    rows = storage.query(
        "SELECT name FROM system.columns WHERE database = {db:String} AND table = 'events' "
        "AND default_kind NOT IN ('MATERIALIZED', 'ALIAS', 'EPHEMERAL') ORDER BY position",
        {"db": storage.database},
    )
    names = [r[0] for r in rows]
    return [
        n
        for n in names
        if _IDENTIFIER.match(n) and not _SECRET_COLUMN.search(n) and not (hide_ip and n == "ip")
    ]


def _select(storage: Storage, spec: ExportSpec, names: list[str]) -> tuple[str, dict[str, Any]]:
    # The table is ordered by (project_id, occurred_at): reading in that order needs no sort.
    sql = (
        f"SELECT {', '.join(f'`{n}`' for n in names)} FROM {storage.database}.events "
        "WHERE project_id = {p:String} "
        "AND occurred_at >= {t0:DateTime64(3, 'UTC')} AND occurred_at < {t1:DateTime64(3, 'UTC')} "
        "ORDER BY occurred_at"
    )
    # Settings ride in the text: the embedded engine streams only calls without settings of
    # their own (it would apply them with SET and materialise the whole result).
    settings: dict[str, Any] = {"log_comment": f"'{spec.comment}'", **FORMAT_SETTINGS[spec.fmt]}
    if storage.target.kind == "http":
        # A server stops a read-only query whose client went away.
        settings["cancel_http_readonly_queries_on_client_close"] = 1
    else:
        settings.update(EMBEDDED_SETTINGS)
    sql += " SETTINGS " + ", ".join(f"{k} = {v}" for k, v in settings.items())
    params = {"p": spec.project_id, "t0": spec.start, "t1": spec.end}
    return sql, params


def csv_header(names: list[str]) -> bytes:
    """The header row exactly as ClickHouse's CSVWithNames writes it."""
    return (",".join('"' + n.replace('"', '""') + '"' for n in names) + "\n").encode()


def chunks(storage: Storage, spec: ExportSpec) -> Iterator[bytes]:
    """The export, in chunks of at most CHUNK_BYTES. Closing the iterator early stops the query."""
    names = columns(storage, spec.hide_ip)
    sql, params = _select(storage, spec, names)
    if spec.stopped.is_set():
        log.info("export %s: query cancelled (the client went away)", spec.marker)
        return
    ch_format = FORMATS[spec.fmt][0]
    if spec.fmt == "parquet" and storage.target.kind == "chdb":
        yield from _spooled(storage, sql, params, spec.marker)
        return
    if spec.fmt == "csv":
        yield csv_header(names)
    with storage.own_client() as client:
        with _unavailable_on_failure():
            # Sync clients give a readable stream: the engine's, or the HTTP response.
            stream: Any = client.raw_stream(sql, parameters=params, fmt=ch_format)
        try:
            while True:
                with _unavailable_on_failure():
                    chunk = stream.read(CHUNK_BYTES)
                if not chunk:
                    return
                yield chunk
        finally:
            with suppress(Exception):
                stream.close()


def spool_root(storage: Storage) -> str:
    """Where the embedded engine writes Parquet files: next to the engine's folder, on the disk
    sized for the data, rather than in /tmp."""
    return os.path.join(os.path.dirname(storage.target.path.rstrip("/")), "export-spool")


def sweep_spool(storage: Storage) -> int:
    """Remove the files of exports whose process died while writing them (a ``kill -9`` or the
    OOM killer leaves a file as large as the export): each folder names its process
    (``export-<pid>-...``); those of processes gone, and those of releases before the name
    carried one, are removed, and any other file there. Returns how many."""
    root = spool_root(storage)
    try:
        names = os.listdir(root)
    except OSError:
        return 0
    removed = 0
    for name in names:
        match = _SPOOL_PID.fullmatch(name)
        if match is not None and process_alive(int(match.group(1))):
            continue  # this process's, or another live one's (a worker beside this one)
        path = os.path.join(root, name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)  # a file left at the top (rmtree refused it, and said nothing)
        except OSError as exc:
            log.warning("could not remove %s from the export spool: %s", path, exc)
            continue
        removed += 1
    if removed:
        log.info("removed %d export file(s) left by processes that stopped mid-export", removed)
    return removed


_SPOOL_PID = re.compile(r"export-(\d+)-.*")


def _spooled(storage: Storage, sql: str, params: dict[str, Any], marker: str) -> Iterator[bytes]:
    spool = spool_root(storage)
    os.makedirs(spool, exist_ok=True)
    folder = tempfile.mkdtemp(prefix=f"export-{os.getpid()}-", dir=spool)
    path = os.path.join(folder, "export.parquet")
    try:
        # The path is made here, never by a request; INTO OUTFILE takes only a literal, and
        # comes before the SETTINGS clause that _select wrote.
        head, _, options = sql.partition(" SETTINGS ")
        try:
            with storage.own_client() as client, _unavailable_on_failure():
                client.command(
                    f"{head} INTO OUTFILE '{path}' FORMAT Parquet SETTINGS {options}",
                    parameters=params,
                )
        except StorageUnavailable as exc:
            if "QUERY_WAS_CANCELLED" not in str(exc):
                raise
            log.info("export %s: query cancelled (the client went away)", marker)
            return
        with open(path, "rb") as file:
            os.unlink(path)  # the open file is all that is left of it
            while chunk := file.read(CHUNK_BYTES):
                yield chunk
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def cancel(storage: Storage, spec: ExportSpec) -> None:
    """Stop the export's query if it still runs (a client that went away)."""
    spec.stopped.set()
    storage.kill("Settings['log_comment'] = {m:String}", {"m": spec.comment})

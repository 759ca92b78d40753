"""The embedded engine's deduplication logs, put right after a crash, before the engine opens.

Every MergeTree table of Tally keeps ``non_replicated_deduplication_window`` block ids in
``<table>/deduplication_logs/deduplication_log_<n>.txt``, one line per record: ``1`` (added) or
``2`` (dropped), the part's name, the block's id (from the INSERT's ``insert_deduplication_token``).
That is what lets the loader INSERT a segment again after a crash and store nothing twice, in
``events`` and in every rollup (storage/loader.py).

ClickHouse appends a block's record *before* it renames the block's new part from
``tmp_insert_...`` to its name, which is the part's commit. With the embedded engine the engine
is Tally's own process, so a SIGKILL or the OOM killer can stop it between the two: the folder
then holds the record of a part that never was (the engine deletes ``tmp_`` folders when it
opens). The segment, still in the ingest log, is loaded again with the same token, and that table
takes it for a duplicate and stores nothing: a whole segment of acknowledged events was lost
from ``events`` that way (a kill at the rename of the ``events`` part: ``strace -e
inject=rename:signal=KILL``), or one rollup missed them while the others had them.

:func:`forget_uncommitted_blocks` runs before this process opens the engine on a folder. For each
table it replays the records, and for every block still recorded whose part is on disk neither
under its own name nor inside a merged part, it appends the drop record ClickHouse writes when it
drops a part, so that the engine forgets the block. The INSERT repeated from the log then stores
it in that table, and only there. It changes nothing while an engine has the folder open (the
engine holds a ``flock`` on ``<folder>/status``; its own INSERTs may be between the two steps),
nor in a table whose logs hold a line it does not know (a later engine's format).

A ClickHouse server has the same window, but Tally's crash does not stop the server mid-INSERT;
a server's own crash is the server's to recover.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["forget_uncommitted_blocks", "uncommitted_blocks"]

log = logging.getLogger("tally.storage")

LOG_NAME = re.compile(r"^deduplication_log_(\d+)\.txt$")
# <partition id>_<min block>_<max block>_<level>[_<mutation>]; a partition id has no "_".
PART_NAME = re.compile(r"^([^_]+)_(\d+)_(\d+)_(\d+)(?:_(\d+))?$")
ADD, DROP = "1", "2"


@dataclass(frozen=True)
class _Part:
    partition: str
    low: int
    high: int

    @classmethod
    def parse(cls, name: str) -> _Part | None:
        match = PART_NAME.match(name)
        if match is None:
            return None
        return cls(match.group(1), int(match.group(2)), int(match.group(3)))

    def covers(self, other: _Part) -> bool:
        return (
            self.partition == other.partition and self.low <= other.low and other.high <= self.high
        )


def forget_uncommitted_blocks(engine_path: str) -> int:
    """Append a drop record for every recorded block whose part is not on disk, in every table
    under ``engine_path``; return how many. Does nothing while an engine has the folder open."""
    root = Path(engine_path)
    if not (root / "store").is_dir():
        return 0  # a new folder: no table yet
    try:
        status = os.open(root / "status", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        log.warning("cannot check the engine's deduplication logs under %s: %s", root, exc)
        return 0
    try:
        try:
            fcntl.flock(status, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0  # the engine is open (in this process or another): its records are live
        forgotten = 0
        for logs in _tables(root):
            try:
                forgotten += _repair_table(logs, root)
            except OSError as exc:
                log.warning("cannot check the deduplication log in %s: %s", logs, exc)
        return forgotten
    finally:
        os.close(status)  # drops the flock


def uncommitted_blocks(engine_path: str) -> list[str]:
    """The parts (``table part``) that tables under ``engine_path`` recorded and do not hold,
    read while the engine is open: after an INSERT that failed in this process (a rename refused
    by a failing disk), the engine still takes that block for stored, until it is opened again.
    Meant for when no other INSERT with a token runs (the loader's own failure)."""
    root = Path(engine_path)
    found = []
    for logs in _tables(root):
        try:
            table = _orphans(logs)
        except OSError:
            continue
        if table is not None and table.orphans:
            name = _table_name(root, logs.parent.name)
            found += [f"{name} {part}" for _, part in table.orphans]
    return found


def _tables(root: Path) -> list[Path]:
    return sorted(root.glob("store/*/*/deduplication_logs"))


@dataclass(frozen=True)
class _Orphans:
    last_log: Path  # the file the engine appends to, where drop records go
    orphans: list[tuple[str, str]]  # (block id, part name) of recorded blocks not on disk


def _orphans(logs: Path) -> _Orphans | None:
    """The table's recorded blocks whose part is not on disk; None when it has no log, or one
    with a record this Tally does not read."""
    files = sorted(
        (int(m.group(1)), logs / m.group(0))
        for m in (LOG_NAME.match(name) for name in os.listdir(logs))
        if m is not None
    )
    if not files:
        return None
    live: dict[str, str] = {}  # block id -> part name, in the order the engine replays them
    for _, path in files:
        for line in _complete_lines(path):
            fields = line.split("\t")
            if len(fields) != 3 or fields[0] not in (ADD, DROP):
                log.warning(
                    "%s holds a record this Tally does not read (%r): left as it is", path, line
                )
                return None
            operation, part_name, block_id = fields
            if operation == ADD:
                live[block_id] = part_name
            else:
                live.pop(block_id, None)
    on_disk = [p for p in map(_Part.parse, os.listdir(logs.parent)) if p is not None]
    orphans = [
        (block_id, part_name)
        for block_id, part_name in live.items()
        if (part := _Part.parse(part_name)) is not None
        and not any(disk.covers(part) for disk in on_disk)
    ]
    return _Orphans(files[-1][1], orphans)


def _repair_table(logs: Path, root: Path) -> int:
    found = _orphans(logs)
    if found is None or not found.orphans:
        return 0
    last, orphans = found.last_log, found.orphans
    table = logs.parent
    _cut_torn_line(last)
    records = "".join(f"{DROP}\t{part}\t{block}\n" for block, part in orphans)
    with open(last, "a", encoding="utf-8") as fh:
        fh.write(records)
        fh.flush()
        os.fsync(fh.fileno())
    log.warning(
        "embedded engine: table %s recorded %d block(s) that a crash stopped before they were "
        "stored (%s); they are forgotten, so that the ingest log's segments load into it again",
        _table_name(root, table.name),
        len(orphans),
        ", ".join(part for _, part in orphans),
    )
    return len(orphans)


def _complete_lines(path: Path) -> list[str]:
    """The records of one log file: its complete lines (a torn last one was never finished,
    so its part was never renamed)."""
    text = path.read_bytes().decode("utf-8", errors="replace")
    lines = text.split("\n")
    return [line for line in lines[:-1] if line]


def _cut_torn_line(path: Path) -> None:
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as fh:
            fh.truncate(data.rfind(b"\n") + 1)
            os.fsync(fh.fileno())


def _table_name(root: Path, uuid: str) -> str:
    """``database.table`` of the table stored under ``store/*/<uuid>`` (its metadata file names
    the uuid), else the uuid."""
    needle = f"UUID '{uuid}'"
    for sql in root.glob("metadata/*/*.sql"):
        with contextlib.suppress(OSError, UnicodeDecodeError):
            if needle in sql.read_text(encoding="utf-8"):
                return f"{sql.parent.name}.{sql.stem}"
    return uuid

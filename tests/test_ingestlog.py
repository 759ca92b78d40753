"""The ingest log on its own (no ClickHouse): framing, torn tails, group commit, the disk cap, a
full or unwritable disk, slots. The loader and the service around it: tests/test_loader.py and
tests/faults/test_wal_crash.py."""

from __future__ import annotations

import ast
import asyncio
import os
from pathlib import Path

import pytest

from tally.storage.client import StorageUnavailable
from tally.storage.ingestlog import (
    FRAME,
    ROWS,
    IngestLog,
    LogFull,
    encode_rows,
    frame,
    header_record,
    pending_since,
    read_segment,
)
from tally.storage.writer import EVENT_COLUMNS

COLUMNS = ("project_id", "name")


def rows(marker: str, n: int) -> list[tuple[str, str]]:
    return [(marker, f"e{i}") for i in range(n)]


def new_log(root: Path, **kw) -> IngestLog:
    options = {"cap_bytes": 1 << 30, "seal_bytes": 1 << 30, "seal_age": 3600.0}
    options.update(kw)
    return IngestLog(root, COLUMNS, **options)


def test_a_segment_cut_at_every_byte_of_its_last_record_keeps_every_record_before_it(tmp_path):
    records = [frame(ROWS, 1000 + i, 2, encode_rows(rows(f"r{i}", 2))) for i in range(3)]
    header = header_record("seg-id", COLUMNS, 999)
    complete = header + records[0] + records[1]
    whole = complete + records[2]
    expected_body = encode_rows(rows("r0", 2)) + encode_rows(rows("r1", 2))
    for cut in range(len(complete), len(whole)):
        root = tmp_path / f"cut{cut}"
        slot = root / "0"
        slot.mkdir(parents=True)
        path = slot / "000000000000-999.seg"
        path.write_bytes(whole[:cut])
        ingest = new_log(root)
        ingest.open()
        try:
            [segment] = ingest.sealed()
            assert segment.events == 4, cut
            assert path.stat().st_size == len(complete), cut  # the torn tail is cut off
            contents = read_segment(path)
            assert contents.segment_id == "seg-id"
            assert contents.columns == list(COLUMNS)
            assert contents.body() == expected_body, cut
        finally:
            ingest.close()
    # The whole segment keeps all three records; a torn tail is no damage: no copy kept.
    assert read_segment(_write(tmp_path / "whole.seg", whole)).events == 6
    assert not (tmp_path / "log-damaged").exists()


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_a_damaged_record_ends_the_segment_there(tmp_path):
    records = [frame(ROWS, 1000 + i, 1, encode_rows(rows(f"r{i}", 1))) for i in range(3)]
    data = bytearray(header_record("x", COLUMNS, 1) + b"".join(records))
    # Flip one byte in the payload of the second record: its checksum fails.
    at = len(header_record("x", COLUMNS, 1)) + len(records[0]) + FRAME.size + 15
    data[at] ^= 0xFF
    contents = read_segment(_write(tmp_path / "a.seg", bytes(data)))
    assert contents.events == 1
    assert contents.body() == encode_rows(rows("r0", 1))


def test_a_segment_cut_inside_its_header_is_removed_at_recovery(tmp_path):
    slot = tmp_path / "log" / "0"
    slot.mkdir(parents=True)
    header = header_record("x", COLUMNS, 5)
    for cut in (0, 3, len(header) - 1):
        path = slot / f"{cut:012d}-5.seg"
        path.write_bytes(header[:cut])
    ingest = new_log(tmp_path / "log")
    ingest.open()
    try:
        assert ingest.sealed() == []
        assert not list(slot.glob("*.seg"))
    finally:
        ingest.close()


def test_a_torn_tail_of_zeros_is_cut_without_a_copy(tmp_path):
    """A crash can leave the last record's blocks unwritten (zeros): a torn tail, no damage."""
    header = header_record("z", COLUMNS, 5)
    record = frame(ROWS, 6, 2, encode_rows(rows("z", 2)))
    slot = tmp_path / "log" / "0"
    slot.mkdir(parents=True)
    path = slot / "000000000000-5.seg"
    path.write_bytes(header + record + b"\0" * 4096)
    ingest = new_log(tmp_path / "log")
    ingest.open()
    try:
        assert [s.events for s in ingest.sealed()] == [2]
        assert path.stat().st_size == len(header + record)
        assert not (tmp_path / "log-damaged").exists()
    finally:
        ingest.close()


def _recovered(tmp_path: Path, data: bytes, caplog) -> tuple[IngestLog, Path]:
    """A log opened on a slot holding one segment of ``data`` (what it says, in ``caplog``)."""
    slot = tmp_path / "log" / "0"
    slot.mkdir(parents=True)
    path = slot / "000000000000-5.seg"
    path.write_bytes(data)
    ingest = new_log(tmp_path / "log")
    with caplog.at_level("WARNING", logger="tally.ingestlog"):
        ingest.open()
    return ingest, path


def test_damage_before_the_last_record_is_kept_and_said_not_cut_as_a_torn_tail(tmp_path, caplog):
    """A byte changed in a segment's middle record: recovery called it a torn tail, said the
    records after it were never acknowledged, and cut them from the only copy."""
    header = header_record("m", COLUMNS, 5)
    records = [frame(ROWS, 6 + i, 1, encode_rows(rows(f"m{i}", 1))) for i in range(3)]
    data = bytearray(header + b"".join(records))
    data[len(header) + len(records[0]) + FRAME.size + 15] ^= 0xFF
    ingest, path = _recovered(tmp_path, bytes(data), caplog)
    try:
        [segment] = ingest.sealed()
        assert segment.events == 1  # the readable record before the damage loads
        kept = tmp_path / "log-damaged" / f"0-{path.name}.damaged"
        assert kept.read_bytes() == bytes(data)  # the whole file, for whoever can read more
        good = len(header) + len(records[0])
        assert f"is damaged at byte {good} of {len(data)}" in caplog.text
        assert "may hold acknowledged events" in caplog.text
        assert "never acknowledged" not in caplog.text
    finally:
        ingest.close()


def test_a_segment_with_an_unreadable_header_and_records_after_it_is_kept(tmp_path, caplog):
    """One byte of a header changed: the segment, 100 acknowledged events after it, was
    deleted as if it had been cut while being created."""
    header = header_record("h", COLUMNS, 5)
    data = bytearray(header + frame(ROWS, 6, 100, encode_rows(rows("h", 100))))
    data[FRAME.size + 20] ^= 0xFF
    ingest, path = _recovered(tmp_path, bytes(data), caplog)
    try:
        assert ingest.sealed() == []
        assert not path.exists()
        kept = tmp_path / "log-damaged" / f"0-{path.name}.damaged"
        assert kept.read_bytes() == bytes(data)
        assert "its header cannot be read" in caplog.text and str(kept) in caplog.text
    finally:
        ingest.close()


async def _appending(ingest: IngestLog, batches: list[list[tuple]]) -> list[BaseException | None]:
    ingest.start()
    try:
        results = await asyncio.gather(*(ingest.append(b) for b in batches), return_exceptions=True)
    finally:
        await ingest.stop()
    return list(results)


def test_requests_that_arrive_together_share_one_write_and_fsync(tmp_path):
    ingest = new_log(tmp_path / "log")
    ingest.open()
    try:
        batches = [rows(f"m{i}", 3) for i in range(200)]
        results = asyncio.run(_appending(ingest, batches))
        assert results == [None] * 200
        assert ingest.acknowledged == 600
        assert ingest.commits < 200, ingest.commits  # group commit, not one fsync per request
        [segment] = ingest.sealed()
        contents = read_segment(segment.path)
        assert contents.events == 600
        got = sorted(tuple(line) for line in _decode(contents.body()))
        assert got == sorted(r for b in batches for r in b)
    finally:
        ingest.close()


def test_a_request_cancelled_while_waiting_leaves_its_group_intact(tmp_path):
    """A waiter cancelled (its client went away) is skipped: its rows are committed with the
    group, and every other request of the group is acknowledged."""
    ingest = new_log(tmp_path / "log")
    ingest.open()

    async def scenario() -> list[object]:
        ingest.start()
        try:
            tasks = [asyncio.ensure_future(ingest.append(rows(f"c{i}", 2))) for i in range(10)]
            await asyncio.sleep(0)  # every append is queued, waiting for the commit
            tasks[3].cancel()
            return await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            await ingest.stop()

    try:
        results = asyncio.run(scenario())
        assert isinstance(results[3], asyncio.CancelledError)
        assert results[:3] + results[4:] == [None] * 9
        [segment] = ingest.sealed()
        got = sorted(tuple(line) for line in _decode(read_segment(segment.path).body()))
        assert got == sorted(r for i in range(10) for r in rows(f"c{i}", 2))
    finally:
        ingest.close()


def _decode(body: bytes) -> list[list]:
    import msgspec

    return [msgspec.json.decode(line) for line in body.splitlines()]


def test_segments_are_sealed_by_size(tmp_path):
    ingest = new_log(tmp_path / "log", seal_bytes=600)
    ingest.open()
    try:

        async def run() -> None:
            ingest.start()
            for i in range(20):
                await ingest.append(rows(f"s{i}", 5))
            await ingest.stop()

        asyncio.run(run())
        sealed = ingest.sealed()
        assert len(sealed) > 2
        assert sum(read_segment(s.path).events for s in sealed) == 100
        assert all(s.size < 600 + 400 for s in sealed)
    finally:
        ingest.close()


def test_past_the_cap_appends_are_refused_and_nothing_of_them_is_written(tmp_path):
    ingest = new_log(tmp_path / "log", cap_bytes=2000)
    ingest.open()
    try:

        async def run() -> list[BaseException | None]:
            ingest.start()
            out: list[BaseException | None] = []
            for i in range(200):
                try:
                    await ingest.append(rows(f"c{i}", 2))
                    out.append(None)
                except StorageUnavailable as exc:
                    out.append(exc)
            await ingest.stop()
            return out

        results = asyncio.run(run())
        accepted = results.count(None)
        assert 0 < accepted < 200
        assert all(isinstance(r, LogFull) for r in results[accepted:])  # refused from then on
        assert ingest.stored_bytes <= 2000
        assert sum(read_segment(s.path).events for s in ingest.sealed()) == 2 * accepted
    finally:
        ingest.close()


def test_a_full_disk_refuses_the_commit_and_leaves_the_log_intact(tmp_path):
    ingest = new_log(tmp_path / "log")
    ingest.open()
    try:

        async def run() -> None:
            ingest.start()
            await ingest.append(rows("before", 2))
            segment = ingest._active
            assert segment is not None
            full = os.open("/dev/full", os.O_WRONLY)
            saved = os.dup(segment.fd)
            os.dup2(full, segment.fd)  # every write to the segment now fails with ENOSPC
            os.close(full)
            with pytest.raises(StorageUnavailable):
                await ingest.append(rows("refused", 2))
            assert ingest.refused == 2 and ingest.write_error  # health says so until a commit
            ingest.recheck()  # the folder takes writes: the health check sees it, unasked
            assert ingest.write_error is None and not list(ingest.slot.path.glob(".probe"))
            os.close(saved)
            # The segment is sealed as it was; the next commit starts a new one.
            await ingest.append(rows("after", 2))
            await ingest.stop()

        asyncio.run(run())
        assert ingest.write_error is None  # the next commit succeeded
        bodies = b"".join(read_segment(s.path).body() for s in ingest.sealed())
        got = sorted(r[0] for r in _decode(bodies))
        assert got == ["after", "after", "before", "before"]
    finally:
        ingest.close()


def test_an_unwritable_log_directory_acknowledges_nothing(tmp_path):
    ingest = new_log(Path("/proc/self/tally-log"))  # not creatable, even by root

    async def run() -> None:
        ingest.start()
        with pytest.raises(StorageUnavailable):
            await ingest.append(rows("x", 1))
        await ingest.stop()

    asyncio.run(run())
    assert ingest.acknowledged == 0


def test_refusals_are_counted_and_said_once_per_interval_not_once_per_commit(tmp_path, caplog):
    """A full disk under load failed hundreds of commits a second, each an ERROR line written to
    the operator's log (which may be on that same disk)."""
    clock = [1000.0]
    ingest = new_log(Path("/proc/self/tally-log"), monotonic=lambda: clock[0])

    async def run() -> None:
        ingest.start()
        for step in range(30):
            if step == 20:
                clock[0] += 11  # past the interval: said again, with what was not said
            with pytest.raises(StorageUnavailable):
                await ingest.append(rows(f"x{step}", 3))
        await ingest.stop()

    with caplog.at_level("ERROR", logger="tally.ingestlog"):
        asyncio.run(run())
    said = [r.getMessage() for r in caplog.records if "cannot write" in r.getMessage()]
    assert len(said) == 2, said
    assert said[1].endswith("(57 more events refused since the last such line)"), said[1]
    assert ingest.refused == 90 and ingest.acknowledged == 0
    assert ingest.write_error is not None


def test_each_process_claims_its_own_slot_and_a_free_slot_is_claimed_again(tmp_path):
    root = tmp_path / "log"
    first, second = new_log(root), new_log(root)
    first.open()
    second.open()
    assert {first.slot.path.name, second.slot.path.name} == {"0", "1"}

    async def write(ingest: IngestLog, marker: str) -> None:
        ingest.start()
        await ingest.append(rows(marker, 3))
        await ingest.stop()

    asyncio.run(write(first, "first"))
    first.close()  # the process is gone: its slot is free, its segment left behind
    again = new_log(root)
    again.open()
    try:
        assert again.slot.path.name == "0"
        assert [s.events for s in again.sealed()] == [3]
    finally:
        again.close()
        second.close()


def test_a_worker_adopts_slots_that_no_process_holds(tmp_path):
    root = tmp_path / "log"
    a, b = new_log(root), new_log(root)
    a.open()
    b.open()

    async def write(ingest: IngestLog, marker: str) -> None:
        ingest.start()
        await ingest.append(rows(marker, 4))
        await ingest.stop()

    asyncio.run(write(b, "left"))
    b.close()  # slot 1 is orphaned; a restart with one worker never claims it
    try:
        assert a.adopt() == 1
        [segment] = a.sealed()
        assert segment.events == 4
        assert pending_since(root) == segment.created_ms
        a.delete_file(segment)
        a.forget(segment)
        assert a.adopted == []  # released once empty
        assert pending_since(root) is None
    finally:
        a.close()


def test_segments_name_their_columns(tmp_path):
    ingest = IngestLog(
        tmp_path / "log", EVENT_COLUMNS, cap_bytes=1 << 20, seal_bytes=1 << 20, seal_age=60
    )
    ingest.open()
    try:
        asyncio.run(_appending(ingest, [[tuple(range(len(EVENT_COLUMNS)))]]))
        [segment] = ingest.sealed()
        assert read_segment(segment.path).columns == list(EVENT_COLUMNS)
    finally:
        ingest.close()


def test_a_damaged_length_that_runs_past_the_end_is_damage_when_records_follow(tmp_path, caplog):
    """One bit of a middle record's length changed: its frame seemed to run past the end of the
    file, which was taken for a crash's torn tail; the records after it, acknowledged, were cut
    with no copy and a warning that they never were."""
    header = header_record("l", COLUMNS, 5)
    records = [frame(ROWS, 6 + i, 1, encode_rows(rows(f"l{i}", 1))) for i in range(4)]
    data = bytearray(header + b"".join(records))
    data[len(header) + len(records[0]) + 2] ^= 0x01  # its length grows by 65,536
    ingest, path = _recovered(tmp_path, bytes(data), caplog)
    try:
        assert [s.events for s in ingest.sealed()] == [1]
        kept = tmp_path / "log-damaged" / f"0-{path.name}.damaged"
        assert kept.read_bytes() == bytes(data)
        assert "is damaged at byte" in caplog.text and "never acknowledged" not in caplog.text
    finally:
        ingest.close()


NEARLY_FULL = """
import asyncio, os, resource, signal, sys
from pathlib import Path
sys.path.insert(0, {service!r})
from tally.storage.ingestlog import IngestLog
from tally.storage.client import StorageUnavailable

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
root = Path({root!r})
log = IngestLog(root, ("a",), cap_bytes=1 << 30, seal_bytes=1 << 30, seal_age=3600.0)
log.open()
resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384))  # no file may grow past 16 KiB

async def run():
    log.start()
    for i in range(5):
        try:
            await log.append([("x" * 30000,)])  # larger than any file may be
            print("acknowledged")
        except StorageUnavailable:
            pass
    await log.recheck_async()  # a 4 KiB test write would pass; one of the failed size does not
    print("error" if log.write_error else "clear")
    await log.append([("small",)])
    await log.recheck_async()
    print("error" if log.write_error else "clear")
    await log.stop()
    print(sorted(p.name for p in (root / "0").iterdir() if p.name.endswith(".seg")))

asyncio.run(run())
"""


def test_a_nearly_full_disk_keeps_health_failing_and_leaves_no_empty_segments(tmp_path):
    """The health check's 4 KiB test write passed on a disk too full for any commit (so health
    answered 200 while collect refused), and each refused commit left a segment of a header
    alone, using up the last of the disk."""
    import subprocess
    import sys

    service = str(Path(__file__).resolve().parents[1] / "service")
    script = NEARLY_FULL.format(service=service, root=str(tmp_path / "log"))
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split("\n")
    assert "acknowledged" not in out
    assert out[0] == "error"  # the test write as large as the refused commit fails too
    assert out[1] == "clear"  # a small commit fits, and succeeding, ends the failure
    segments = ast.literal_eval(out[2])
    assert len(segments) == 1, segments  # the small commit's; no header-only ones left


def test_the_health_check_opens_a_log_that_could_not_be_opened_at_start(tmp_path):
    """A start that could not open the log (its folder not makeable) kept /api/health at 503 on
    a quiet site, once the disk was fixed, until an event came: the check's test write skipped
    a log without a slot."""
    blocker = tmp_path / "data"
    blocker.write_text("a file where the data folder should be")
    ingest = new_log(blocker / "log")
    with pytest.raises(OSError):
        ingest.open()
    ingest.write_error = "cannot open"  # as app.py records it
    ingest.recheck()
    assert ingest.write_error  # still not writable
    blocker.unlink()
    ingest.recheck()
    try:
        assert ingest.write_error is None and ingest.slot is not None
    finally:
        ingest.close()

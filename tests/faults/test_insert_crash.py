"""SIGKILL inside the loader's INSERT, at each table's commit, with the embedded engine.

ClickHouse records an inserted block's id (the deduplication token's) before it renames the
block's new part, which is the part's commit; with the embedded engine that is Tally's own
process. A clean-clone CI run lost a whole segment of acknowledged events (1,280) when a kill
landed between the two: the segment, loaded again after the restart under its token, was taken
for a duplicate (storage/dedup_log.py).

Here the loader runs in a process of its own under ``strace``, which kills it with SIGKILL as it
makes the k-th ``rename`` call, for every k the INSERT makes: one part per table, ``events``
first and then each rollup. A real ``tally serve`` then restarts on the folder and loads the
segment again. Every event must be in ``events`` exactly once, and in every rollup exactly once
(each rollup's count equals what ``events`` holds). Without ``strace`` (a machine with only
Python) those runs skip; the last test makes the same state by hand and runs everywhere.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from syscalls import Injection, require_strace
from test_crash import engine_read, new_key
from test_wal_crash import backlog_loaded, wait_for

from served import Server
from tally.storage.dedup_log import forget_uncommitted_blocks

pytestmark = pytest.mark.slow

EVENTS = 60

# The loader of a `tally serve` worker, alone in a process: loads every sealed segment the data
# folder's log holds, then exits.
LOAD = """
import asyncio, sys
from pathlib import Path
from tally.storage.client import Storage, parse_url
from tally.storage.ingestlog import IngestLog
from tally.storage.loader import Loader
from tally.storage.writer import LOGGED_COLUMNS, segment_inserter

data = Path(sys.argv[1])
storage = Storage(parse_url(f"chdb://{data / 'clickhouse'}"), 2)
log = IngestLog(data / "log", LOGGED_COLUMNS, cap_bytes=1 << 30, seal_bytes=1 << 30, seal_age=3600)
log.open()

async def main():
    loader = Loader(log, segment_inserter(storage))
    log.start()
    loader.start()
    await loader.flush()
    await log.stop()
    await loader.stop(5)

asyncio.run(main())
"""

# The embedded engine open on a folder, and kept open until killed.
HOLD = """
import sys, time
import clickhouse_connect
client = clickhouse_connect.get_client(dsn="chdb://" + sys.argv[1])
client.query("SELECT count() FROM tally.events")
print("open", flush=True)
time.sleep(600)
"""

# The stored events' ids (with how often each is stored), and what each rollup counts of the
# events next to what it holds.
READ_STORED = """
import json, sys
import clickhouse_connect
client = clickhouse_connect.get_client(dsn="chdb://" + sys.argv[1])
counted = {
    "events_daily": "count()", "events_hourly": "count()", "clients_daily": "count()",
    "visitors_daily": "countIf(visitor_id != '')", "events_quarter": "count()",
    "visitors_quarter": "countIf(visitor_id != '')", "audience_quarter": "count()",
    "sessions_daily": "count()", "session_days": "count()", "sessions_quarter": "count()",
    "paths_daily": "countIf(name = 'pageview' AND path != '')",
    "referrers_daily": "countIf(name = 'pageview' AND referrer != '')",
}
out = {}
for table, expected in counted.items():
    column = "views" if table in ("paths_daily", "referrers_daily") else "events"
    held = client.query(f"SELECT sum({column}) FROM tally.{table}").result_rows[0][0]
    want = client.query(f"SELECT {expected} FROM tally.events").result_rows[0][0]
    out[table] = [int(held), int(want)]
# event_visitors keeps a set of (name, visitor, bot flag, bucket): a part stored twice repeats
# members, a part lost misses some.
held = client.query(
    "SELECT uniqExact(name, visitor_hash, is_bot, b) FROM tally.event_visitors "
    "ARRAY JOIN buckets AS b"
).result_rows[0][0]
want = client.query(
    "SELECT uniqExactIf((name, sipHash64(visitor_id), is_bot, "
    "toStartOfFifteenMinutes(occurred_at)), visitor_id != '') FROM tally.events"
).result_rows[0][0]
out["event_visitors"] = [int(held), int(want)]
ids = client.query("SELECT JSONExtractString(metadata, 'uid') AS uid, count() "
                   "FROM tally.events GROUP BY uid").result_rows
print(json.dumps({"ids": dict(ids), "rollups": out}))
"""


def loader(data: Path, strace: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*strace, sys.executable, "-c", LOAD, str(data)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def segments(data: Path) -> list[Path]:
    return sorted(data.glob("log/*/*.seg"))


@pytest.fixture(scope="module")
def unloaded(tmp_path_factory) -> tuple[Path, set[str]]:
    """A data folder a real `tally serve` left with one acknowledged segment not yet loaded
    (stopped before its load, then killed), and the ids of its events."""
    data = tmp_path_factory.mktemp("unloaded")
    server = Server(data, TALLY_FAULT_PAUSE_AT="before_load", TALLY_LOG_SEAL_AGE_MS="50")
    try:
        key = new_key(server.url)
        ids = {f"e{n}" for n in range(EVENTS)}
        events = [
            {
                "name": "pageview" if n % 3 else "signup",
                "sessionId": f"s{n % 7}",
                "visitorId": f"v{n % 5}",
                "url": f"https://example.com/p{n % 4}",
                "referrer": "https://news.example.org/" if n % 2 else "",
                "metadata": {"uid": f"e{n}"},
            }
            for n in range(EVENTS)
        ]
        answer = httpx.post(
            f"{server.url}/api/collect", json={"events": events}, headers={"x-api-key": key}
        )
        assert answer.status_code == 202, answer.text
        wait_for((data / "fault-paused").exists, "the loader to reach its INSERT")
    finally:
        server.kill()
        server.proc.wait(timeout=30)
        server.log.close()
    time.sleep(0.5)  # the worker, killed with the group, lets go of the folder
    assert len(segments(data)) == 1
    (data / "fault-paused").unlink()
    return data, ids


def restart_and_load(data: Path) -> None:
    restarted = Server(data)  # forgets what the crash recorded, then loads the log
    try:
        wait_for(lambda: backlog_loaded(restarted.url), "the backlog to be loaded")
    finally:
        assert restarted.stop() == 0
    assert not segments(data)


def assert_stored_once(data: Path, ids: set[str]) -> None:
    # One process reads both (an engine's start is most of a read's time: about 20 s of the
    # test's checks when each read had a process of its own).
    read = engine_read(READ_STORED, data)
    stored = read["ids"]
    assert set(stored) == ids, f"{len(ids - set(stored))} acknowledged events lost"
    assert not {uid for uid, n in stored.items() if n > 1}, "events stored twice"
    rollups = read["rollups"]
    wrong = {table: pair for table, pair in rollups.items() if pair[0] != pair[1]}
    assert not wrong, f"rollups that do not count each event once ([held, events]): {wrong}"


def test_sigkill_at_each_commit_of_an_insert_loses_nothing_and_counts_nothing_twice(
    tmp_path, unloaded
):
    require_strace()
    template, ids = unloaded
    # A run without a kill: the renames the load makes, each one a part's commit.
    dry = tmp_path / "dry"
    shutil.copytree(template, dry, symlinks=True)
    trace = tmp_path / "renames.txt"
    done = loader(dry, ["strace", "-f", "-qq", "-o", str(trace), "-e", "trace=rename"])
    assert done.returncode == 0, done.stderr[-2000:]
    renames = [line for line in trace.read_text().splitlines() if "rename(" in line]
    assert len(renames) >= 10, renames  # events and its rollups
    assert all("/tmp_insert_" in line for line in renames), renames
    assert_stored_once(dry, ids)

    for k in range(1, len(renames) + 1):
        data = tmp_path / f"kill-at-{k}"
        shutil.copytree(template, data, symlinks=True)
        inject = f"inject=rename:signal=KILL:when={k}"
        killed = loader(data, ["strace", "-f", "-qq", "-o", "/dev/null", "-e", inject])
        assert killed.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL), (
            f"the loader was not killed at rename {k}: {killed.returncode} {killed.stderr[-500:]}"
        )
        assert len(segments(data)) == 1, f"the segment left the log at rename {k}"
        restart_and_load(data)
        assert_stored_once(data, ids)


def test_a_block_recorded_but_never_committed_is_loaded_again(tmp_path, unloaded):
    """The state such a kill leaves, made by hand: the segment loaded once, then the part that
    load committed to ``events`` removed with the engine closed, and the segment put back.
    ClickHouse still holds the block's record; a restart must store the segment in ``events``
    again, and not in the rollups, which hold it."""
    template, ids = unloaded
    data = tmp_path / "data"
    shutil.copytree(template, data, symlinks=True)
    [segment] = segments(data)
    kept = segment.read_bytes()
    done = loader(data, [])
    assert done.returncode == 0, done.stderr[-2000:]
    assert not segments(data)
    table = events_folder(data)
    parts = [p for p in table.iterdir() if p.is_dir() and p.name[0].isdigit()]
    assert len(parts) == 1, parts
    shutil.rmtree(parts[0])
    segment.write_bytes(kept)

    # While an engine has the folder open its records are live (its own INSERTs may be between
    # the record and the rename): nothing is forgotten then.
    logs = sorted((table / "deduplication_logs").iterdir())
    before = [p.read_bytes() for p in logs]
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(data / "clickhouse")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "open"
        assert forget_uncommitted_blocks(str(data / "clickhouse")) == 0
        assert [p.read_bytes() for p in logs] == before
    finally:
        holder.kill()
        holder.wait(timeout=30)

    restart_and_load(data)
    assert_stored_once(data, ids)


def events_folder(data: Path) -> Path:
    """The folder of ``tally.events`` in the engine's store (its metadata names its uuid)."""
    engine = data / "clickhouse"
    text = (engine / "metadata" / "tally" / "events.sql").read_text()
    uuid = text.split("UUID '", 1)[1].split("'", 1)[0]
    return engine / "store" / uuid[:3] / uuid


def test_a_refused_commit_restarts_the_worker_and_loses_nothing(tmp_path):
    """The same record without its part, left by a rename that fails (a failing disk) in a
    process that lives on: the engine keeps taking the block for stored, so the loader's retry
    would have been dropped as a duplicate and the segment deleted. The worker exits instead, as
    a kill would, and the respawned one forgets the record and loads the segment."""
    require_strace()
    server = Server(tmp_path, TALLY_LOG_SEAL_AGE_MS="50")
    try:
        key = new_key(server.url)
        [worker] = server.workers()
        # Every thread's first rename from now on fails with EIO: the loader's INSERT commits
        # its events part first (a background merge refused once retries by itself).
        with Injection(worker, "rename:error=EIO:when=1"):
            ids = {f"r{n}" for n in range(EVENTS)}
            events = [
                {"name": "pageview", "path": "/", "visitorId": f"v{n % 3}", "metadata": {"uid": u}}
                for n, u in enumerate(sorted(ids))
            ]
            answer = httpx.post(
                f"{server.url}/api/collect", json={"events": events}, headers={"x-api-key": key}
            )
            assert answer.status_code == 202, answer.text
            wait_for(lambda: worker not in server.workers(), "the worker to exit", 60)
        wait_for(lambda: backlog_loaded(server.url), "the respawned worker to load the backlog")
    finally:
        assert server.stop() == 0
    log = Path(server.log.name).read_text()
    assert "This process exits now, so that the engine is opened again" in log, log[-3000:]
    assert "events recorded 1 block(s) that a crash stopped" in log, log[-3000:]
    assert not segments(tmp_path)
    assert_stored_once(tmp_path, ids)


def test_a_segment_is_deleted_only_once_its_parts_are_on_disk(tmp_path):
    """The engine writes a part without an fsync, and the loader deletes the segment, durably,
    once the INSERT returns: a power cut after that could keep the deletion and lose the part.
    Between the two the loader now syncs the engine's filesystem (``syncfs``). Traced in a real
    ``tally serve``'s worker: a successful ``syncfs`` comes after the INSERT's part renames and
    before the segment's unlink."""
    require_strace()
    server = Server(tmp_path)
    [worker] = server.workers()
    trace = tmp_path / "trace.txt"
    strace = subprocess.Popen(
        [
            "strace",
            "-f",
            "-qq",
            "-o",
            str(trace),
            "-p",
            str(worker),
            "-e",
            "trace=syncfs,unlink,unlinkat,rename,renameat,renameat2",
        ]
    )
    try:
        time.sleep(1)  # attached to every thread
        key = new_key(server.url)
        body = {"events": [{"name": "pageview", "metadata": {"uid": "synced"}}]}
        answer = httpx.post(f"{server.url}/api/collect", json=body, headers={"x-api-key": key})
        assert answer.status_code == 202, answer.text
        wait_for(lambda: backlog_loaded(server.url), "the segment's load")
    finally:
        strace.send_signal(signal.SIGINT)
        strace.wait(timeout=30)
    assert server.stop() == 0
    lines = trace.read_text().splitlines()
    unlinked = [i for i, line in enumerate(lines) if "unlink" in line and '.seg"' in line]
    assert unlinked, "\n".join(lines[-40:])
    first = unlinked[0]
    parts = [i for i, line in enumerate(lines[:first]) if "rename" in line and "tmp_insert" in line]
    assert parts, "\n".join(lines[: first + 1])
    synced = [
        i
        for i, line in enumerate(lines[:first])
        if "syncfs(" in line and line.rstrip().endswith("= 0")
    ]
    assert synced and synced[-1] > parts[-1], "\n".join(lines[parts[-1] : first + 1])

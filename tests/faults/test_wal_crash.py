"""SIGKILL of a real `tally serve` at each point of the ingest path, of the main process alone and
of the whole process group: mid-append, after the fsync before the 202, after the 202 before
loading, during the INSERT, after the INSERT before the segment is deleted. The worker stops at
the point (TALLY_FAULT_PAUSE_AT, a test-only hook) and says so in ``<data>/fault-paused``; the
test kills it there, restarts on the same data, waits until the backlog is loaded and checks the
Jepsen way: every acknowledged event is stored, none twice."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_crash import ingest_until, new_key, stored_ids

from served import Server

pytestmark = pytest.mark.slow

# Acknowledgements happen before each of these points but the first two: those pause the 60th
# group commit, so that earlier commits were acknowledged and this one never is.
POINTS = {
    "mid_append": "mid_append:60",
    "after_fsync": "after_fsync:60",
    "before_load": "before_load",
    "during_insert": "during_insert",
    "after_insert": "after_insert",
}


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def wait_for(condition, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def backlog_loaded(url: str) -> bool:
    try:
        backlog = httpx.get(f"{url}/api/health", timeout=5).json()["backlog"]
    except (httpx.HTTPError, KeyError, ValueError):
        return False
    return backlog["segments"] == 0 and backlog["events"] == 0


@pytest.mark.parametrize("whom", ["main", "group"])
@pytest.mark.parametrize("point", list(POINTS))
def test_sigkill_at_each_point_loses_nothing_acknowledged_and_stores_nothing_twice(
    tmp_path, point, whom
):
    marker = tmp_path / "fault-paused"
    server = Server(tmp_path, TALLY_FAULT_PAUSE_AT=POINTS[point], TALLY_LOG_SEAL_AGE_MS="100")
    key = new_key(server.url)
    stop = threading.Event()
    result: dict[str, set[str]] = {}
    runner = threading.Thread(
        target=lambda: result.update(acked=ingest_until(server.url, key, stop, senders=4))
    )
    runner.start()
    wait_for(marker.exists, f"the worker to reach {point}")
    workers = children(server.proc.pid)
    if whom == "main":
        # The PID an operator or the OOM killer sees. Its granian worker outlives it (another
        # change makes it exit with its parent); it is killed right after, as that change does.
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait(timeout=30)
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    else:
        server.kill()
    stop.set()
    runner.join(timeout=120)
    assert not runner.is_alive()
    server.log.close()
    for pid in workers:  # gone before the restart claims the data folder
        wait_for(lambda pid=pid: not Path(f"/proc/{pid}").exists(), "the worker to exit", 60)
    acked = result["acked"]
    if point not in ("mid_append", "after_fsync"):
        assert acked, f"nothing was acknowledged before {point}"

    restarted = Server(tmp_path)  # recovers the log and loads it while serving
    try:
        wait_for(lambda: backlog_loaded(restarted.url), "the backlog to be loaded")
    finally:
        assert restarted.stop() == 0
    stored = stored_ids(tmp_path)
    stored.pop("", None)
    missing = acked - stored.keys()
    duplicated = {uid for uid, n in stored.items() if n > 1}
    assert not missing, f"{len(missing)} acknowledged events lost"
    assert not duplicated, f"{len(duplicated)} events stored twice"
    assert not list(tmp_path.glob("log/*/*.seg"))

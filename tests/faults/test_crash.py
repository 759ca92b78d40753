"""Faults against a real `tally serve`: SIGKILL mid-ingest loses nothing acknowledged and stores
nothing twice; SIGTERM drains. Events carry unique ids in metadata; after the run the stored ids
are read straight from the data folder (by a separate process: the embedded engine allows one
process per folder) and checked the Jepsen way: acknowledged ⊆ stored, no duplicates."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conftest import token
from served import Server

pytestmark = pytest.mark.slow

READ_IDS = """
import json, sys
import clickhouse_connect
client = clickhouse_connect.get_client(dsn="chdb://" + sys.argv[1])
rows = client.query("SELECT JSONExtractString(metadata, 'uid') AS uid, count() "
                    "FROM tally.events GROUP BY uid").result_rows
print(json.dumps(dict(rows)))
"""


def engine_read(script: str, data: Path) -> Any:
    """What ``script`` prints (JSON) when run on the data folder's engine by a process of its own
    (the embedded engine allows one process per folder)."""
    out = subprocess.run(
        [sys.executable, "-c", script, str(data / "clickhouse")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(out.stdout)


def stored_ids(data: Path) -> dict[str, int]:
    return engine_read(READ_IDS, data)


def ingest_until(
    url: str,
    key: str,
    stop: threading.Event,
    senders: int = 8,
    first_ack: threading.Event | None = None,
    codes: list[int] | None = None,
) -> set[str]:
    """Senders post 20-event batches with unique ids; return the ids of acknowledged batches.
    ``first_ack`` is set when the first batch is acknowledged; ``codes`` gets every status."""
    acked: set[str] = set()
    lock = threading.Lock()

    def sender(n: int) -> None:
        with httpx.Client(timeout=10) as http:
            for i in range(100_000):
                if stop.is_set():
                    return
                ids = [f"{n}-{i}-{j}" for j in range(20)]
                body = {"events": [{"name": "pageview", "metadata": {"uid": u}} for u in ids]}
                try:
                    response = http.post(
                        f"{url}/api/collect", json=body, headers={"x-api-key": key}
                    )
                except httpx.HTTPError:
                    return  # the server went away: this batch is unacknowledged
                if codes is not None:
                    codes.append(response.status_code)
                if response.status_code == 202:
                    with lock:
                        acked.update(ids)
                    if first_ack is not None:
                        first_ack.set()

    threads = [threading.Thread(target=sender, args=(n,)) for n in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return acked


def new_key(url: str) -> str:
    created = httpx.post(
        f"{url}/api/projects",
        json={"name": "faults"},
        headers={"authorization": f"Bearer {token('faults')}"},
    )
    return created.json()["apiKey"]


@pytest.mark.parametrize("kill_after", [0.05, 0.6, 1.5])
def test_sigkill_mid_ingest_loses_no_acknowledged_event(tmp_path, kill_after):
    server = Server(tmp_path)
    key = new_key(server.url)
    stop, first_ack = threading.Event(), threading.Event()
    result: dict[str, set[str]] = {}
    runner = threading.Thread(
        target=lambda: result.update(acked=ingest_until(server.url, key, stop, first_ack=first_ack))
    )
    runner.start()
    # Kill points are measured from the first acknowledgement, so every run kills mid-stream
    # however long the new key takes to become known.
    assert first_ack.wait(timeout=30), "nothing was acknowledged"
    time.sleep(kill_after)
    server.kill()
    stop.set()
    runner.join(timeout=60)
    acked = result["acked"]
    assert acked, "nothing was acknowledged before the kill"

    restarted = Server(tmp_path)  # recovers on the same data
    assert restarted.stop() == 0
    stored = stored_ids(tmp_path)
    missing = acked - stored.keys()
    duplicated = {uid for uid, n in stored.items() if n > 1}
    assert not missing, f"{len(missing)} acknowledged events lost"
    assert not duplicated, f"{len(duplicated)} events stored twice"


def test_sigterm_drains_and_exits_within_its_timeout(tmp_path):
    server = Server(tmp_path)
    key = new_key(server.url)
    stop = threading.Event()
    result: dict[str, set[str]] = {}
    runner = threading.Thread(
        target=lambda: result.update(acked=ingest_until(server.url, key, stop))
    )
    runner.start()
    time.sleep(1.0)
    # Exit code 0 says the worker drained and stopped by itself: one that outlived
    # TALLY_SHUTDOWN_TIMEOUT_SECONDS would have been killed by granian (no wall-clock bound here).
    code = server.stop(timeout=120)
    stop.set()
    runner.join(timeout=60)
    assert code == 0
    stored = stored_ids(tmp_path)
    assert result["acked"] and not (result["acked"] - stored.keys())
    assert all(n == 1 for n in stored.values())


def test_slow_clients_are_cut_off(tmp_path):
    import socket

    server = Server(tmp_path, TALLY_HEADER_TIMEOUT_SECONDS="1", TALLY_BODY_TIMEOUT_SECONDS="1")
    try:
        key = new_key(server.url)
        # Slow body: headers promise 1000 bytes, 10 arrive, then nothing.
        # The client never sends the rest and never closes: an answer at all (rather than the
        # socket's own 60 s timeout) is the server cutting it off. No wall-clock bound.
        with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
            sock.sendall(
                f"POST /api/collect HTTP/1.1\r\nHost: x\r\nx-api-key: {key}\r\n"
                'content-type: application/json\r\ncontent-length: 1000\r\n\r\n{"events"'.encode()
            )
            answer = sock.recv(4096).decode()
            assert answer.startswith("HTTP/1.1 408"), answer
            assert '{"error":"Request timeout"}' in answer
        # Slow headers: the connection is closed without an answer.
        with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
            sock.sendall(b"POST /api/collect HTTP/1.1\r\nHost: x\r\n")
            try:
                closed = sock.recv(4096)
            except ConnectionResetError:
                closed = b""
            assert closed == b"" or closed.startswith(b"HTTP/1.1 408"), closed
        assert httpx.get(f"{server.url}/api/health").status_code == 200  # still serving
    finally:
        server.stop()


def loaded(url: str) -> bool:
    """True once the server's ingest log is empty (everything acknowledged is in ClickHouse)."""
    backlog = httpx.get(f"{url}/api/health", timeout=10).json()["backlog"]
    return backlog["segments"] == 0 and backlog["events"] == 0


def poll(condition, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_storage_outage_under_load_then_lost_answers_then_recovery(tmp_path):
    """ClickHouse refuses every INSERT for a while under load: collect keeps answering 202 (the
    log is under its cap), then INSERTs succeed with their answers lost (retried with the same
    token), then storage is back: everything acknowledged is stored, once."""
    fault = tmp_path / "fault"
    server = Server(
        tmp_path,
        TALLY_FAULT_FILE=str(fault),
        TALLY_LOAD_RETRY_MIN_MS="20",
        TALLY_LOAD_RETRY_MAX_MS="200",
        TALLY_LOG_SEAL_AGE_MS="100",
    )
    codes: list[int] = []
    try:
        key = new_key(server.url)
        fault.write_text("fail")
        stop = threading.Event()
        result: dict[str, set[str]] = {}
        runner = threading.Thread(
            target=lambda: result.update(
                acked=ingest_until(server.url, key, stop, senders=4, codes=codes)
            )
        )
        runner.start()
        poll(lambda: loaded_events(server.url) >= 2000, "a backlog while INSERTs fail")
        fault.write_text("lose")
        poll(lambda: failed_loads(server.url) >= 10, "lost answers")
        stop.set()
        runner.join(timeout=120)
        fault.unlink()
        poll(lambda: loaded(server.url), "the backlog to be loaded")
    finally:
        assert server.stop() == 0
    acked = result["acked"]
    assert len(acked) >= 2000  # every request under the cap was acknowledged
    stored = stored_ids(tmp_path)
    stored.pop("", None)
    assert not (acked - stored.keys()), "acknowledged events lost"
    assert all(n == 1 for n in stored.values()), "events stored twice"
    assert set(codes) == {202}, "refused under the cap"


def loaded_events(url: str) -> int:
    """Events waiting in the log (not yet loaded)."""
    return httpx.get(f"{url}/api/health", timeout=10).json()["backlog"]["events"]


def failed_loads(url: str) -> int:
    return httpx.get(f"{url}/api/health", timeout=10).json()["backlog"]["failedLoads"]


def test_at_the_log_cap_collect_answers_503_then_recovers(tmp_path):
    fault = tmp_path / "fault"
    server = Server(
        tmp_path,
        TALLY_FAULT_FILE=str(fault),
        TALLY_LOG_CAP_MB="0.05",
        TALLY_LOAD_RETRY_MIN_MS="20",
        TALLY_LOAD_RETRY_MAX_MS="200",
    )
    try:
        key = new_key(server.url)
        fault.write_text("fail")
        accepted: list[str] = []
        refused: list[httpx.Response] = []
        with httpx.Client(timeout=30) as http:
            for i in range(400):
                ids = [f"cap-{i}-{j}" for j in range(10)]
                body = {"events": [{"name": "pageview", "metadata": {"uid": u}} for u in ids]}
                response = http.post(
                    f"{server.url}/api/collect", json=body, headers={"x-api-key": key}
                )
                assert response.status_code in (202, 503), response.text
                if response.status_code == 202:
                    assert not refused, "accepted after the cap was reached while storage is down"
                    accepted += ids
                else:
                    refused.append(response)
        assert accepted and refused, "the cap was never reached"
        assert all(r.json() == {"error": "Storage unavailable"} for r in refused)
        assert all(int(r.headers["retry-after"]) > 0 for r in refused)
        fault.unlink()  # storage is back: the log drains, collect accepts again
        poll(lambda: loaded(server.url), "the backlog to be loaded")
        again = httpx.post(
            f"{server.url}/api/collect",
            json={"events": [{"name": "ok", "metadata": {"uid": "after"}}]},
            headers={"x-api-key": key},
            timeout=30,
        )
        assert again.status_code == 202
    finally:
        assert server.stop() == 0
    stored = stored_ids(tmp_path)
    assert all(stored.get(uid) == 1 for uid in [*accepted, "after"])
    assert not any(uid.startswith("cap-") and uid not in set(accepted) for uid in stored)

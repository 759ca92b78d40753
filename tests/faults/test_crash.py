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


def stored_ids(data: Path) -> dict[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", READ_IDS, str(data / "clickhouse")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(out.stdout)


def ingest_until(
    url: str,
    key: str,
    stop: threading.Event,
    senders: int = 8,
    first_ack: threading.Event | None = None,
) -> set[str]:
    """Senders post 20-event batches with unique ids; return the ids of acknowledged batches.
    ``first_ack`` is set when the first batch is acknowledged."""
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


def worker_rss_mb(server: Server) -> float:
    """Resident memory of the granian worker (the child that runs Tally), in MiB."""
    children = Path(f"/proc/{server.proc.pid}/task/{server.proc.pid}/children").read_text().split()
    total = 0.0
    for pid in children:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) / 1024
    return total


def test_overload_sheds_quickly_keeps_memory_bounded_and_recovers(tmp_path):
    server = Server(tmp_path, TALLY_BUFFER_LIMIT_EVENTS="2000", TALLY_BATCH_MAX_DELAY_MS="300")
    try:
        key = new_key(server.url)
        baseline = worker_rss_mb(server)
        answers: list[tuple[int, str]] = []
        lock = threading.Lock()

        # Counted, not timed: the flood lasts until 40 refusals were seen (or 100 requests per
        # sender), however fast the machine is.
        def flood() -> None:
            body = {"events": [{"name": "pageview", "path": "/x" * 500}] * 100}
            with httpx.Client(timeout=120) as http:
                for _ in range(100):
                    with lock:
                        if sum(1 for a in answers if a[0] == 503) >= 40:
                            return
                    response = http.post(
                        f"{server.url}/api/collect", json=body, headers={"x-api-key": key}
                    )
                    with lock:
                        answers.append(
                            (response.status_code, response.headers.get("retry-after", ""))
                        )

        threads = [threading.Thread(target=flood) for _ in range(40)]
        for thread in threads:
            thread.start()
        peak = baseline
        while any(t.is_alive() for t in threads):
            peak = max(peak, worker_rss_mb(server))
            time.sleep(0.05)
        shed = [a for a in answers if a[0] == 503]
        assert shed, "the buffer limit was never reached"
        assert {a[0] for a in answers} <= {202, 503}
        assert all(a[1] for a in shed)  # Retry-After on every refusal
        # (That a refusal does not wait for storage is tested without a clock in
        # tests/test_writer.py; its latency is a benchmark figure, not a test verdict.)
        # The cap: 2,000 buffered events of ~1 KiB cannot grow the worker by more than this.
        assert peak - baseline < 300, f"worker grew from {baseline:.0f} to {peak:.0f} MiB"
        recovered = httpx.post(
            f"{server.url}/api/collect",
            json={"events": [{"name": "ok"}]},
            headers={"x-api-key": key},
            timeout=30,
        )
        assert recovered.status_code == 202
    finally:
        server.stop()


def test_storage_failure_then_lost_answers_then_recovery(tmp_path):
    fault = tmp_path / "fault"
    server = Server(
        tmp_path,
        TALLY_FAULT_FILE=str(fault),
        TALLY_INSERT_ATTEMPTS="3",
        TALLY_INSERT_RETRY_BACKOFF_MS="20",
    )
    try:
        key = new_key(server.url)

        def send(uid: str) -> httpx.Response:
            body = {
                "events": [
                    {"name": "pageview", "metadata": {"uid": f"{uid}-{j}"}} for j in range(5)
                ]
            }
            return httpx.post(
                f"{server.url}/api/collect", json=body, headers={"x-api-key": key}, timeout=30
            )

        assert send("before").status_code == 202
        fault.write_text("fail")  # storage refuses every INSERT
        failed = [send(f"failed{i}") for i in range(3)]
        assert all(
            r.status_code == 503 and r.json() == {"error": "Storage unavailable"} for r in failed
        )
        fault.write_text("lose")  # INSERTs succeed but their answers are lost: retried
        lost = [send(f"lost{i}") for i in range(3)]
        fault.unlink()  # storage is back
        assert send("after").status_code == 202
    finally:
        assert server.stop() == 0
    stored = stored_ids(tmp_path)
    assert all(stored.get(f"before-{j}") == 1 and stored.get(f"after-{j}") == 1 for j in range(5))
    assert not any(uid.startswith("failed") for uid in stored)  # 503: nothing stored
    # A lost answer is retried with the same token: stored once, never twice, whatever the
    # client was told (503 after all attempts lost their answers).
    assert all(stored.get(f"lost{i}-{j}") == 1 for i in range(3) for j in range(5))
    assert all(r.status_code == 503 for r in lost)

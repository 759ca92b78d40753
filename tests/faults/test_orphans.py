"""Process faults of `tally serve` itself: kill -9 of the server process, of its granian worker
alone, or of the whole group. A worker never outlives its server (the port and the embedded
engine's lock are freed), a killed worker is replaced, a restart on the same data and port works
at once, and every acknowledged event is stored exactly once."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_crash import ingest_until, new_key, stored_ids

from served import PORT_TAKEN, Server, alive, free_port, wait_healthy
from tally.supervision import port_is_free

pytestmark = pytest.mark.slow

# Generous: these wait for an event (a process exiting, a server answering); they never pass or
# fail on how fast the machine is, only on whether the event happens at all.
PATIENCE = 60.0


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {PATIENCE} s"
        time.sleep(0.1)


def ingest_while(server: Server, action) -> set[str]:
    """Send batches until the first is acknowledged, run ``action``, stop; the acknowledged ids."""
    key = new_key(server.url)
    stop, first_ack = threading.Event(), threading.Event()
    result: dict[str, set[str]] = {}
    runner = threading.Thread(
        target=lambda: result.update(
            acked=ingest_until(server.url, key, stop, senders=4, first_ack=first_ack)
        )
    )
    runner.start()
    assert first_ack.wait(timeout=PATIENCE), "nothing was acknowledged"
    action()
    stop.set()
    runner.join(timeout=PATIENCE)
    return result["acked"]


def check_stored_once(data: Path, acked: set[str]) -> None:
    stored = stored_ids(data)
    assert not acked - stored.keys(), f"{len(acked - stored.keys())} acknowledged events lost"
    assert not {uid for uid, n in stored.items() if n > 1}, "events stored twice"


def test_killing_the_server_process_takes_its_worker_with_it(tmp_path):
    server = Server(tmp_path)
    [worker] = server.workers()

    def kill_main() -> None:
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait(timeout=PATIENCE)

    acked = ingest_while(server, kill_main)
    server.log.close()
    wait_for(lambda: not alive(worker), "the orphaned worker's exit")
    wait_for(lambda: port_is_free("127.0.0.1", server.port), "the port's release")
    # Same data, same port, at once: no "Cannot lock file", no "address in use".
    restarted = Server(tmp_path, port=server.port)
    assert httpx.get(f"{restarted.url}/api/health", timeout=10).status_code == 200
    assert restarted.stop() == 0
    check_stored_once(tmp_path, acked)


def test_a_worker_killed_alone_is_replaced(tmp_path):
    server = Server(tmp_path)
    [worker] = server.workers()
    acked = ingest_while(server, lambda: os.kill(worker, signal.SIGKILL))
    wait_for(lambda: not alive(worker), "the worker's exit")
    # granian respawns it (respawn_failed_workers); the server process stays.
    wait_for(lambda: len(server.workers()) == 1, "a new worker")
    assert server.proc.poll() is None
    [replacement] = server.workers()
    assert replacement != worker

    def healthy() -> bool:
        try:
            return httpx.get(f"{server.url}/api/health", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(healthy, "the new worker answering")
    key = new_key(server.url)
    body = {"events": [{"name": "pageview", "metadata": {"uid": "after"}}]}
    response = httpx.post(f"{server.url}/api/collect", json=body, headers={"x-api-key": key})
    assert response.status_code == 202
    assert server.stop() == 0
    check_stored_once(tmp_path, acked | {"after"})


def test_killing_the_whole_group_then_restarting(tmp_path):
    server = Server(tmp_path)
    workers = server.workers()
    acked = ingest_while(server, server.kill)
    # SIGKILL is delivered at once, but a process exits only once its memory is torn down (the
    # embedded engine's, under load): seen alive just after the kill in one CI run.
    wait_for(lambda: not any(alive(pid) for pid in workers), "the killed workers' exit")
    restarted = Server(tmp_path, port=server.port)
    assert restarted.stop() == 0
    check_stored_once(tmp_path, acked)


def test_a_second_server_on_a_taken_port_refuses_to_start(tmp_path):
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    first = Server(tmp_path / "one")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_")}
    env.update(TALLY_DATA_DIR=str(tmp_path / "two"), TALLY_JWT_SECRET="x" * 32)
    done = subprocess.run(
        [sys.executable, "-m", "tally", "serve", "--port", str(first.port)],
        cwd=tmp_path / "two",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert f"port {first.port} on 127.0.0.1 is already in use" in done.stderr
    # The first server still has the port to itself.
    assert httpx.get(f"{first.url}/api/health", timeout=10).status_code == 200
    assert first.stop() == 0


def test_two_servers_started_at_once_on_one_port_do_not_share_it(tmp_path):
    """Started together on a free port, two servers both passed the port check (the schema step
    runs between it and granian's bind), both listened (SO_REUSEPORT) and the kernel split the
    connections between their data folders: a client's requests went to either, one of them
    dropped when that one stopped. Now one serves and the other refuses the port."""
    port = free_port()
    servers = []
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        servers.append(Server(tmp_path / name, port, healthy=False))
    try:
        wait_for(lambda: any(s.proc.poll() is not None for s in servers), "a refusal")
        (refused,) = [s for s in servers if s.proc.poll() is not None]
        (serving,) = [s for s in servers if s is not refused]
        assert refused.proc.returncode != 0
        assert f"port {port} on 127.0.0.1 {PORT_TAKEN}" in refused.output()
        wait_healthy(serving.url, serving.proc, serving.output)
        assert serving.stop() == 0
    finally:
        for server in servers:
            if server.proc.poll() is None:
                os.killpg(server.proc.pid, signal.SIGKILL)
                server.proc.wait()


def test_killing_the_server_during_its_migrate_step_takes_the_step_with_it(tmp_path):
    """`tally serve` applies the schema in a child process before it starts its worker. Killed
    then (kill -9 of the PID it shows), that child went on with the engine open, and restarts
    were refused as "in use by another process (perhaps an older Tally)" until it ended. It dies
    with the server now, as the workers do, and a restart works at once."""
    Server(tmp_path).stop()  # a schema, so that the paused step finds one
    paused = Server(tmp_path, healthy=False, TALLY_FAULT_PAUSE_AT="migrate")
    try:
        wait_for(lambda: (tmp_path / "fault-paused").exists(), "the migrate step's pause")
        [step] = paused.workers()  # its one child: the migrate step, not yet a worker
        os.kill(paused.proc.pid, signal.SIGKILL)
        paused.proc.wait(timeout=PATIENCE)
        wait_for(lambda: not alive(step), "the migrate step's exit")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(paused.proc.pid, signal.SIGKILL)
        paused.log.close()
    (tmp_path / "fault-paused").unlink()
    restarted = Server(tmp_path)
    assert httpx.get(f"{restarted.url}/api/health", timeout=10).status_code == 200
    assert restarted.stop() == 0

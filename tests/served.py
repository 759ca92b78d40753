"""A real `tally serve` subprocess on embedded storage, for the tests that need the whole process
(faults, browser): started on a free port, healthy before it is returned, stopped by signal."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from conftest import JWT_SECRET, token
from tally.supervision import PORT_TAKEN

# The logs of the servers started by the test that runs now: a failed test shows their ends
# (conftest.pytest_runtest_makereport), since the data folder holding them may be gone by then.
STARTED_LOGS: list[Path] = []
# The logs of the servers still running, whichever test started them: a module's server, started
# for its first test, shows for a failure of any test after it.
RUNNING_LOGS: dict[Path, None] = {}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(
    url: str, proc: subprocess.Popen, output: Callable[[], str], timeout: float = 120
) -> None:
    """Returns once ``url`` answers /api/health with 200; fails with the server's ``output`` if
    it exits first. The timeout waits for an event and is generous for a busy machine."""
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, f"tally serve exited early: {output()}"
        try:
            if httpx.get(f"{url}/api/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "tally serve did not become healthy"
        time.sleep(0.2)


class Server:
    """``tally serve`` on the data folder ``data``, with ``args`` after its own; ``settings`` are
    extra ``TALLY_*`` variables.
    Rate limits are off and keys refresh every half second unless ``settings`` say otherwise.
    ``healthy=False`` returns at once, for a server that is not meant to answer yet."""

    def __init__(
        self,
        data: Path,
        port: int | None = None,
        *,
        args: tuple[str, ...] = (),
        healthy: bool = True,
        **settings: str,
    ) -> None:
        self.data = data
        env = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_")}
        env.update(
            TALLY_DATA_DIR=str(data),
            TALLY_JWT_SECRET=JWT_SECRET,
            TALLY_COLLECT_LIMIT_PER_KEY="",
            TALLY_COLLECT_LIMIT_PER_IP="",
            TALLY_LOG_LEVEL="WARNING",
            TALLY_KEY_REFRESH_SECONDS="0.5",
        )
        env.update(settings)  # over those defaults
        # A free port can be taken by another test's server or client before this one binds it:
        # that server refuses it (supervision.claim_port), and another free port is tried.
        for attempt in range(1, 4):
            self.port = port or free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            self.log = open(data / f"serve-{self.port}.log", "w")  # noqa: SIM115
            STARTED_LOGS.append(Path(self.log.name))
            RUNNING_LOGS[Path(self.log.name)] = None
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tally", "serve", "--port", str(self.port), *args],
                cwd=data,  # the embedded engine reads config.xml from its working directory
                env=env,
                stdout=self.log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            if not healthy:
                return
            try:
                wait_healthy(self.url, self.proc, self.output)
                return
            except AssertionError:
                taken = self.proc.poll() is not None and PORT_TAKEN in self.output()
                if port is not None or not taken or attempt == 3:
                    raise
                self._closed()

    def _closed(self) -> None:
        self.log.close()
        RUNNING_LOGS.pop(Path(self.log.name), None)

    def output(self) -> str:
        """What the server has written to its log so far."""
        return Path(self.log.name).read_text(errors="replace")

    def workers(self) -> list[int]:
        """PIDs of the server's granian workers (its child processes)."""
        return children(self.proc.pid)

    def new_project(self, user: str, name: str) -> tuple[str, str]:
        """(project id, API key) of a new project of ``user``."""
        created = httpx.post(
            f"{self.url}/api/projects",
            json={"name": name},
            headers={"authorization": f"Bearer {token(user)}"},
        )
        assert created.status_code == 201, created.text
        return created.json()["projectId"], created.json()["apiKey"]

    def collect(self, key: str, events: list[dict]) -> None:
        """POST ``events`` to collect (batches of 100) and return once they are all loaded."""
        with httpx.Client(timeout=60) as http:
            for start in range(0, len(events), 100):
                answer = http.post(
                    f"{self.url}/api/collect",
                    json={"events": events[start : start + 100]},
                    headers={"x-api-key": key},
                )
                assert answer.status_code == 202, answer.text
            deadline = time.monotonic() + 120
            while http.get(f"{self.url}/api/health").json()["backlog"]["events"]:
                assert time.monotonic() < deadline, "the ingest log was not loaded"
                time.sleep(0.1)

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)  # granian's workers too: a machine crash
        self.proc.wait(timeout=30)
        self._closed()

    def stop(self, timeout: float = 60) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self._closed()


def children(pid: int) -> list[int]:
    """Live child processes of ``pid`` (from /proc; Linux)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces, so split after its closing paren.
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == pid and state != "Z":
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"

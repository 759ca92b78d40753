"""A real `tally serve` subprocess on embedded storage, for the tests that need the whole process
(faults, browser): started on a free port, healthy before it is returned, stopped by signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from conftest import JWT_SECRET
from test_cli import free_port


class Server:
    """``tally serve`` on the data folder ``data``; ``settings`` are extra ``TALLY_*`` variables.
    Rate limits are off and keys refresh every half second unless ``settings`` say otherwise."""

    def __init__(self, data: Path, **settings: str) -> None:
        self.data, self.port = data, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_")}
        env.update(
            TALLY_DATA_DIR=str(data),
            TALLY_JWT_SECRET=JWT_SECRET,
            TALLY_COLLECT_LIMIT_PER_KEY="",
            TALLY_COLLECT_LIMIT_PER_IP="",
            TALLY_LOG_LEVEL="WARNING",
            TALLY_KEY_REFRESH_SECONDS="0.5",
            **settings,
        )
        self.log = open(data / f"serve-{self.port}.log", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tally", "serve", "--port", str(self.port)],
            cwd=data,  # the embedded engine reads config.xml from its working directory
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, (data / self.log.name).read_text()
            try:
                if httpx.get(f"{self.url}/api/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "tally serve did not start"
            time.sleep(0.2)

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)  # granian's workers too: a machine crash
        self.proc.wait(timeout=30)
        self.log.close()

    def stop(self, timeout: float = 60) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.log.close()

"""A running `tally serve` whose worker cannot start a thread (a container's pids limit, memory
exhausted): ``strace`` makes its ``clone3``/``clone`` calls fail with EAGAIN (skipped where
strace is absent). Requests that need a thread get 503 with ``Retry-After``, never a 500; the
others, collect under its rate limits included, are answered as usual; and once threads start
again every endpoint answers again, without a restart.

Found by a review that made the worker's ``mmap`` fail with ENOMEM: the rate limiter started a
thread every 10 ms or so to drop its expired counters (http/ratelimit.py), its failure gave the
dashboard a 500, and a start that failed half-way froze the worker for good."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from syscalls import Injection, require_strace
from test_wal_crash import backlog_loaded, wait_for

from conftest import token
from served import Server

pytestmark = pytest.mark.slow


def test_no_thread_to_start_gets_503_not_500_and_passes(tmp_path):
    require_strace()
    server = Server(
        tmp_path,
        TALLY_COLLECT_LIMIT_PER_KEY="100000/second",
        TALLY_COLLECT_LIMIT_PER_IP="100000/second",
    )
    session = {"authorization": f"Bearer {token('owner')}"}
    try:
        project, key = server.new_project("owner", "resources")
        dashboard = f"{server.url}/api/dashboard?projectId={project}"
        breakdown = f"{server.url}/api/breakdown?projectId={project}&by=path"
        assert httpx.get(dashboard, headers=session, timeout=30).status_code == 200
        # The ingest log's commit thread starts at the first collect: started before.
        first = {"events": [{"name": "pageview", "path": "/first"}]}
        answer = httpx.post(f"{server.url}/api/collect", json=first, headers={"x-api-key": key})
        assert answer.status_code == 202, answer.text
        [worker] = server.workers()
        statuses: dict[str, list[int]] = {"collect": [], "dashboard": [], "breakdown": []}
        with Injection(worker, "clone3,clone:error=EAGAIN"), httpx.Client(timeout=30) as http:
            for n in range(30):
                events = {"events": [{"name": "pageview", "path": f"/{n}"}]}
                answer = http.post(
                    f"{server.url}/api/collect", json=events, headers={"x-api-key": key}
                )
                statuses["collect"].append(answer.status_code)
                for name, url in (
                    ("dashboard", f"{dashboard}&days={1 + n % 30}"),
                    ("breakdown", f"{breakdown}&days={1 + n % 30}"),
                ):
                    answer = http.get(url, headers=session)
                    statuses[name].append(answer.status_code)
                    if answer.status_code == 503:
                        assert answer.json() == {"error": "Storage unavailable"}
                        assert answer.headers["retry-after"] == "2"
                time.sleep(0.02)
        assert all(500 not in answered for answered in statuses.values()), statuses
        assert set(statuses["collect"]) == {202}, statuses
        # Threads start again: every endpoint answers, and the events load.
        wait_for(lambda: httpx.get(dashboard, headers=session).status_code == 200, "the dashboard")
        assert httpx.get(breakdown, headers=session).status_code == 200
        wait_for(lambda: backlog_loaded(server.url), "the backlog to be loaded")
        assert httpx.get(dashboard, headers=session).json()["summary"]["totalEvents"] == 31
    finally:
        assert server.stop() == 0

"""The wall clock stepped under a real `tally serve` (libfaketime): an NTP correction of a clock
that ran fast, a clock set back while a project's deletion waits, visitors of minutes ago.

The server runs under libfaketime with only the wall clock faked (FAKETIME_DONT_FAKE_MONOTONIC=1,
as a real clock step leaves CLOCK_MONOTONIC alone) and FAKETIME_NO_CACHE=1, so rewriting the
timestamp file steps the running server's clock. libfaketime 0.9.10 then fails
clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) with EINVAL, which Python's time.sleep uses:
a sitecustomize in the server's PYTHONPATH sleeps through select instead (a harness matter, not
Tally's). ClickHouse is the embedded engine in the server process (faked alike); the loader's
INSERTs are refused through TALLY_FAULT_FILE to play an outage."""

from __future__ import annotations

import os
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import jwt
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conftest import JWT_SECRET
from served import Server

pytestmark = pytest.mark.slow

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
SHIM = """
import select, time
def _sleep(seconds):
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    select.select([], [], [], seconds)
time.sleep = _sleep
"""

if not os.path.exists(LIBFAKETIME):
    pytest.skip("libfaketime is not installed (apt-get install faketime)", allow_module_level=True)


class SteppedServer:
    """`tally serve` whose wall clock is real time plus ``offset`` seconds, set while it runs."""

    def __init__(self, tmp_path: Path, offset: int = 0) -> None:
        data = tmp_path / "data"
        data.mkdir()
        shim = tmp_path / "shim"
        shim.mkdir()
        (shim / "sitecustomize.py").write_text(SHIM)
        self.clock_file = tmp_path / "faketime"
        self.fault_file = tmp_path / "fault"
        self.offset = 0
        self.step(offset)
        paths = [str(shim), *filter(None, [os.environ.get("PYTHONPATH", "")])]
        self.server = Server(
            data,
            LD_PRELOAD=LIBFAKETIME,
            FAKETIME_TIMESTAMP_FILE=str(self.clock_file),
            FAKETIME_NO_CACHE="1",
            FAKETIME_DONT_FAKE_MONOTONIC="1",
            PYTHONPATH=os.pathsep.join(paths),
            TALLY_FAULT_FILE=str(self.fault_file),
        )
        self.url = self.server.url

    def step(self, offset: int) -> None:
        """Set the server's wall clock to real time plus ``offset`` seconds."""
        self.clock_file.write_text(f"{offset:+d}\n")
        self.offset = offset

    def now(self) -> float:
        """The server's wall clock."""
        return time.time() + self.offset

    def outage(self, on: bool) -> None:
        self.fault_file.write_text("fail" if on else "")

    def auth(self, sub: str) -> dict[str, str]:
        """A session issued by the server's clock (not refused as from the future)."""
        now = int(self.now())
        claims = {"sub": sub, "iat": now - 5, "exp": now + 86400}
        return {"authorization": "Bearer " + jwt.encode(claims, JWT_SECRET, "HS256")}

    def new_project(self, sub: str) -> tuple[str, str]:
        created = httpx.post(
            f"{self.url}/api/projects", json={"name": "clock"}, headers=self.auth(sub)
        )
        assert created.status_code == 201, created.text
        return created.json()["projectId"], created.json()["apiKey"]

    def collect(self, key: str, visitor: str) -> None:
        body = {"events": [{"name": "pageview", "path": "/", "visitorId": visitor}]}
        answer = httpx.post(f"{self.url}/api/collect", json=body, headers={"x-api-key": key})
        assert answer.status_code == 202, answer.text

    def backlog(self) -> int:
        return httpx.get(f"{self.url}/api/health/live").json()["backlog"]["events"]

    def wait_loaded(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.backlog():
            assert time.monotonic() < deadline, "the ingest log was not loaded"
            time.sleep(0.1)

    def dashboard(self, sub: str, project_id: str) -> dict:
        """Yesterday to tomorrow (UTC): an event received while the clock ran an hour fast
        carries that time, on tomorrow's date when that was after midnight."""
        today = datetime.fromtimestamp(time.time(), UTC).date()
        days = f"from={today - timedelta(days=1)}&to={today + timedelta(days=1)}"
        answer = httpx.get(
            f"{self.url}/api/dashboard?projectId={project_id}&{days}",
            headers=self.auth(sub),
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        return answer.json()

    def stop(self) -> None:
        self.step(0)
        self.server.stop()


@pytest.fixture
def stepped(tmp_path):
    server = SteppedServer(tmp_path)
    try:
        yield server
    finally:
        server.stop()


def epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_data_through_claims_no_pending_event_after_a_fast_clock_is_corrected(stepped):
    """The clock runs an hour fast; an event is acknowledged while ClickHouse refuses INSERTs;
    NTP sets the clock right. The event was acknowledged seconds ago and is not in the dashboard,
    so dataThrough must not be later than its acknowledgement: it was the request's time (the
    segment is stamped an hour ahead, and min(now, stamp) is now)."""
    stepped.step(3600)
    project_id, key = stepped.new_project("clock-thr")
    stepped.outage(True)
    stepped.collect(key, "v1")
    acknowledged = time.time()  # real time, which the corrected clock reads
    time.sleep(1.5)
    stepped.step(0)  # NTP corrects the clock
    time.sleep(1.5)
    dash = stepped.dashboard("clock-thr", project_id)
    assert stepped.backlog() == 1
    assert dash["summary"]["totalEvents"] == 0  # not loaded: not in this answer
    assert epoch(dash["dataThrough"]) <= acknowledged, (
        f"dataThrough {dash['dataThrough']} claims an event acknowledged "
        f"{epoch(dash['dataThrough']) - acknowledged:.1f} s before it, not loaded"
    )
    stepped.outage(False)
    stepped.wait_loaded()
    dash = stepped.dashboard("clock-thr", project_id)
    assert dash["summary"]["totalEvents"] == 1
    assert epoch(dash["dataThrough"]) > acknowledged


def test_a_deletion_waiting_when_the_clock_is_set_back_finishes_once_loaded(stepped):
    """A project's deletion waits for its acknowledged events to load (ClickHouse slow: its
    INSERTs refused for a moment); the clock is set back an hour meanwhile, then the INSERTs
    succeed and the log is empty. The deletion must finish (204), not wait for the wall clock
    to pass its cut again and answer 503 after 30 s."""
    project_id, key = stepped.new_project("clock-del")
    stepped.outage(True)
    stepped.collect(key, "v1")
    answer: dict = {}

    def delete() -> None:
        started = time.monotonic()
        response = httpx.delete(
            f"{stepped.url}/api/projects?projectId={project_id}",
            headers=stepped.auth("clock-del"),
            timeout=120,
        )
        answer.update(status=response.status_code, seconds=time.monotonic() - started)

    deleting = threading.Thread(target=delete)
    deleting.start()
    time.sleep(1.0)
    stepped.step(-3600)  # the clock set back while the deletion waits
    time.sleep(0.5)
    stepped.outage(False)
    deleting.join(timeout=120)
    assert stepped.backlog() == 0
    assert answer["status"] == 204, answer
    assert answer["seconds"] < 15, answer
    listed = httpx.get(f"{stepped.url}/api/projects", headers=stepped.auth("clock-del")).json()
    assert project_id not in [p["id"] for p in listed["projects"]]


def test_live_visitors_are_not_brought_back_by_a_clock_set_back(stepped):
    """Ten visitors send an event; six minutes pass (the clock moved on: none is live); the clock
    is set back an hour and one new visitor sends an event. One visitor is live, not eleven: the
    ten's events carry times after the new clock's now, and `occurred_at >= now - 5 min` alone
    counted them for the next hour."""
    project_id, key = stepped.new_project("clock-live")
    for n in range(10):
        stepped.collect(key, f"early-{n}")
    stepped.wait_loaded()
    live_url = f"{stepped.url}/api/live?projectId={project_id}"
    assert httpx.get(live_url, headers=stepped.auth("clock-live")).json()["liveVisitors"] == 10
    stepped.step(6 * 60)  # six minutes later
    assert httpx.get(live_url, headers=stepped.auth("clock-live")).json()["liveVisitors"] == 0
    stepped.step(6 * 60 - 3600)  # then the clock is set back an hour
    stepped.collect(key, "late")
    stepped.wait_loaded()
    live = httpx.get(live_url, headers=stepped.auth("clock-live")).json()["liveVisitors"]
    dash = stepped.dashboard("clock-live", project_id)
    assert (live, dash["liveVisitors"]) == (1, 1)

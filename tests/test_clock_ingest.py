"""The ingest log's times when the wall clock is set back (an NTP correction) while events wait:
the dashboard's dataThrough claims no event that is not loaded, /api/health's backlog age keeps
growing, and a project's deletion still loads (and so deletes) what was acknowledged before it.
The clocks are injected: the log's and the health endpoint's ``time``, frozen and moved by hand,
so no verdict depends on how fast the machine is."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import pytest

import tally.http.controllers as controllers
import tally.storage.ingestlog as ingestlog
from conftest import auth, new_project, stored
from tally.storage.ingestlog import (
    ROWS,
    IngestLog,
    encode_rows,
    frame,
    header_record,
    pending_since,
)

HOUR_MS = 3_600_000
SEAL_AGE_MS = 3_600_000  # nothing seals by age while a test runs
COLUMNS = ("project_id", "name")


class FrozenClocks:
    """Stands in for the ``time`` module: a wall clock and a monotonic clock that move only
    when told to."""

    def __init__(self) -> None:
        self.wall_ns = time.time_ns()
        self.mono = 1000.0

    def time(self) -> float:
        return self.wall_ns / 1e9

    def time_ns(self) -> int:
        return self.wall_ns

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.wall_ns += int(seconds * 1e9)
        self.mono += seconds

    def set_back(self, seconds: float) -> None:
        self.wall_ns -= int(seconds * 1e9)

    @property
    def wall_ms(self) -> int:
        return self.wall_ns // 1_000_000

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def frozen(monkeypatch: pytest.MonkeyPatch, client: Any) -> FrozenClocks:
    clocks = FrozenClocks()
    monkeypatch.setattr(ingestlog, "time", clocks)
    monkeypatch.setattr(controllers, "time", clocks)
    ingest = client.app.state.ingest
    monkeypatch.setattr(ingest, "monotonic", clocks.monotonic, raising=False)
    return clocks


def collect(client: Any, key: str, path: str) -> None:
    body = {"events": [{"name": "pageview", "path": path, "visitorId": "v"}]}
    response = client.post("/api/collect", json=body, headers={"x-api-key": key})
    assert response.status_code == 202, response.text


def data_through_ms(client: Any, user: str, project_id: str) -> int:
    dash = client.get(f"/api/dashboard?projectId={project_id}&days=2", headers=auth(user))
    assert dash.status_code == 200, dash.text
    return int(datetime.fromisoformat(dash.json()["dataThrough"]).timestamp() * 1000)


def test_data_through_claims_no_event_acknowledged_after_the_clock_was_set_back(
    make_client, monkeypatch
):
    """s_datathrough_step.py: E1 opens a segment, the clock steps back an hour, E2 is
    acknowledged into the same segment. dataThrough must not pass E2's acknowledgement (it was
    min(now, the segment's creation): now, five seconds after E2's, with E2 not loaded)."""
    with make_client(log_seal_age_ms=SEAL_AGE_MS) as client:
        client.wait_for_load = False
        project_id, key = new_project(client, user="frank")
        clocks = frozen(monkeypatch, client)
        collect(client, key, "/e1")
        clocks.set_back(3600)
        acknowledged_ms = clocks.wall_ms
        collect(client, key, "/e2")
        clocks.advance(5)
        assert data_through_ms(client, "frank", project_id) <= acknowledged_ms
        client.load()  # both load; then the claim may move on
        assert data_through_ms(client, "frank", project_id) == clocks.wall_ms


def test_a_recovered_segment_is_stamped_by_its_earliest_acknowledgement(tmp_path):
    """A segment left by a Tally that did not rename it when the clock was set back: its name
    says when it was begun, its records an hour earlier. Recovered, it is pending since then."""
    begun = 1_800_000_000_000
    root = tmp_path / "log"
    (root / "0").mkdir(parents=True)
    data = header_record("seg", COLUMNS, begun)
    data += frame(ROWS, begun + 10, 1, encode_rows([("p", "a")]))
    data += frame(ROWS, begun - HOUR_MS, 1, encode_rows([("p", "b")]))
    (root / "0" / f"000000000000-{begun}.seg").write_bytes(data)
    assert pending_since(root) == begun
    ingest = IngestLog(root, COLUMNS, cap_bytes=1 << 30, seal_bytes=1 << 30, seal_age=3600.0)
    ingest.open()
    try:
        assert pending_since(root) == begun - HOUR_MS
        [segment] = ingest.sealed()
        assert segment.events == 2
        assert segment.path.name == f"000000000000-{begun - HOUR_MS}.seg"
    finally:
        ingest.close()


def test_the_backlog_age_keeps_growing_when_the_clock_is_set_back(make_client, monkeypatch):
    """s_health_age_step.py: an event waits; the clock steps back an hour; oldestAgeSeconds
    (docs/operations.md: alert when it stays above a few seconds) read 0."""
    with make_client(log_seal_age_ms=SEAL_AGE_MS) as client:
        client.wait_for_load = False
        _, key = new_project(client, user="jill")
        clocks = frozen(monkeypatch, client)
        collect(client, key, "/age")
        clocks.advance(10)
        assert client.get("/api/health").json()["backlog"]["oldestAgeSeconds"] == pytest.approx(
            10, abs=0.01
        )
        clocks.set_back(3600)
        clocks.advance(5)
        for path in ("/api/health", "/api/health/live"):
            backlog = client.get(path).json()["backlog"]
            assert backlog["oldestAgeSeconds"] == pytest.approx(15, abs=0.01), path


def test_a_recovered_segment_ages_from_its_stamp_then_by_the_monotonic_clock(tmp_path):
    now_ms, mono = [1_800_000_000_000], [500.0]
    root = tmp_path / "log"
    (root / "0").mkdir(parents=True)
    begun = now_ms[0] - 20_000
    data = header_record("seg", COLUMNS, begun) + frame(ROWS, begun, 1, encode_rows([("p", "a")]))
    (root / "0" / f"000000000000-{begun}.seg").write_bytes(data)
    ingest = IngestLog(
        root,
        COLUMNS,
        cap_bytes=1 << 30,
        seal_bytes=1 << 30,
        seal_age=3600.0,
        wall_ms=lambda: now_ms[0],
        monotonic=lambda: mono[0],
    )
    ingest.open()
    try:
        assert ingest.backlog().oldest_age_seconds == pytest.approx(20)
        now_ms[0] -= HOUR_MS  # the clock set back
        mono[0] += 5
        assert ingest.backlog().oldest_age_seconds == pytest.approx(25)
    finally:
        ingest.close()


def test_a_deletion_after_the_clock_was_set_back_deletes_what_was_acknowledged_before_it(
    make_client, monkeypatch
):
    """An event acknowledged, the clock set back an hour, the project deleted: the event is in a
    segment stamped an hour after the deletion's cut, and it must still be loaded before the
    purge (it was left in the log and stored under the deleted project after the purge)."""
    with make_client(log_seal_age_ms=SEAL_AGE_MS) as client:
        client.wait_for_load = False
        project_id, key = new_project(client, user="dora")
        clocks = frozen(monkeypatch, client)
        collect(client, key, "/before-delete")
        clocks.set_back(3600)
        deleted = client.delete(f"/api/projects?projectId={project_id}", headers=auth("dora"))
        assert deleted.status_code == 204
        client.load()
        sql = "SELECT count() FROM {db}.events WHERE project_id = {p:String}"
        assert stored(client, sql, p=project_id) == [(0,)]

"""The ingest path in one process on the real engine: 202 once on the log, one INSERT per sealed
segment, storage outages absorbed up to the cap, old segments loaded after a schema change, and
the freshness fields (health's backlog, the dashboard's dataThrough). Crashes of a real server:
tests/faults/test_wal_crash.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conftest import COLUMNS_BEFORE_005, auth, new_project, stored
from tally.storage.client import Storage, parse_url
from tally.storage.ingestlog import FRAME, RECORD, pending_since, read_segment, write_segment
from tally.storage.writer import EVENT_COLUMNS


def old_row(project_id: str, at: float, path: str, session: str) -> tuple:
    """A row in the order of COLUMNS_BEFORE_005."""
    head = (project_id, "pageview", at, at, path, "", "", session, "v")
    return (*head, "Chrome", "Linux", "desktop", None, "{}", "127.0.0.1", "ua", "k")


def batch(marker: str, n: int) -> dict:
    return {
        "events": [{"name": "pageview", "path": f"/{i}", "visitorId": marker} for i in range(n)]
    }


def count(client, project_id: str, marker: str | None = None) -> int:
    sql = "SELECT count() FROM {db}.events WHERE project_id = {p:String}"
    if marker is None:
        return stored(client, sql, p=project_id)[0][0]
    return stored(client, sql + " AND visitor_id = {m:String}", p=project_id, m=marker)[0][0]


def until(
    condition: Callable[[], object],
    what: str,
    timeout: float = 120,
    state: Callable[[], object] | None = None,
) -> None:
    """Poll until ``condition`` holds; the timeout is generous, never a verdict on speed.
    ``state()``, when given, is said in the failure: what the test was waiting on had reached."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}" + (
            f" ({state()})" if state else ""
        )
        time.sleep(0.05)


def loader_state(loader) -> str:
    return f"failures {loader.failures}, inserts {loader.inserts}, last error {loader.last_error!r}"


def backlog(client) -> dict:
    response = client.get("/api/health")
    assert response.status_code == 200, response.text
    return response.json()["backlog"]


def test_concurrent_requests_share_fsyncs_and_inserts_and_all_are_stored_once(make_client):
    with make_client(log_seal_age_ms=200) as client:
        client.wait_for_load = False
        project_id, key = new_project(client)
        ingest, loader = client.app.state.ingest, client.app.state.loader
        commits, inserts = ingest.commits, loader.inserts

        def send(i: int) -> int:
            response = client.post(
                "/api/collect", json=batch(f"m{i}", 10), headers={"x-api-key": key}
            )
            return response.status_code

        with ThreadPoolExecutor(max_workers=40) as pool:
            codes = list(pool.map(send, range(120)))
        assert codes == [202] * 120
        assert ingest.commits - commits < 120  # group commit: requests share an fsync
        # Loaded by the loader alone (seal by age), each event once.
        until(lambda: count(client, project_id) == 1200, "the loader to store all 1,200")
        assert loader.inserts - inserts < 120  # one INSERT per segment, not per request
        assert all(count(client, project_id, f"m{i}") == 10 for i in range(120))
        until(lambda: backlog(client)["events"] == 0, "an empty backlog")
        rollup = stored(
            client,
            "SELECT sum(events) FROM {db}.events_daily WHERE project_id = {p:String}",
            p=project_id,
        )[0][0]
        assert rollup == 1200


def test_storage_outage_is_absorbed_by_the_log_and_loaded_after_it(make_client, tmp_path):
    fault = tmp_path / "fault"
    with make_client(fault_file=str(fault), load_retry_min_ms=10, load_retry_max_ms=50) as client:
        client.wait_for_load = False
        project_id, key = new_project(client)
        loader = client.app.state.loader
        fault.write_text("fail")  # every INSERT is refused
        with ThreadPoolExecutor(max_workers=8) as pool:
            codes = list(
                pool.map(
                    lambda i: (
                        client.post(
                            "/api/collect", json=batch(f"o{i}", 5), headers={"x-api-key": key}
                        ).status_code
                    ),
                    range(40),
                )
            )
        assert codes == [202] * 40  # under the cap: no 503 while ClickHouse refuses
        until(lambda: loader.failures >= 3, "the loader to retry")
        assert count(client, project_id) == 0
        assert backlog(client)["events"] == 200
        # the liveness answer carries the same backlog without asking storage
        live = client.get("/api/health/live").json()
        assert live["status"] == "ok" and live["backlog"]["events"] == 200
        assert live["backlog"]["failedLoads"] >= 3
        # INSERTs succeed, their answers are lost: retried, and deduplicated. Two lost answers
        # (a segment stored, and stored again, without the loader knowing): each is an INSERT
        # that ran, synced the engine's disk and raised, so this waits on real loads. Counted
        # from the first lost answer, as an INSERT refused before the switch may still fail.
        fault.write_text("lose")
        until(
            lambda: "answer lost" in loader.last_error,
            "a lost answer",
            state=lambda: loader_state(loader),
        )
        lost_from = loader.failures
        until(
            lambda: loader.failures >= lost_from + 1 and loader.inserts == 0,
            "retries whose answers were lost",
            state=lambda: loader_state(loader),
        )
        assert "answer lost" in loader.last_error
        fault.unlink()  # storage is back: the loader catches up by itself
        until(
            lambda: backlog(client)["events"] == 0,
            "the backlog to be loaded",
            state=lambda: loader_state(loader),
        )
        assert count(client, project_id) == 200
        assert all(count(client, project_id, f"o{i}") == 5 for i in range(40))


def test_at_the_cap_collect_answers_503_and_recovers_when_storage_is_back(make_client, tmp_path):
    fault = tmp_path / "fault"
    with make_client(
        fault_file=str(fault), log_cap_mb=0.02, load_retry_min_ms=10, load_retry_max_ms=50
    ) as client:
        client.wait_for_load = False
        project_id, key = new_project(client)
        fault.write_text("fail")
        answers = [
            client.post("/api/collect", json=batch(f"c{i}", 10), headers={"x-api-key": key})
            for i in range(60)
        ]
        codes = [r.status_code for r in answers]
        accepted = codes.count(202)
        assert 0 < accepted < 60, codes
        assert codes == [202] * accepted + [503] * (60 - accepted)  # refused from the cap on
        refused = answers[-1]
        assert refused.json() == {"error": "Storage unavailable"}
        assert int(refused.headers["retry-after"]) > 0
        fault.unlink()
        until(lambda: backlog(client)["events"] == 0, "the backlog to be loaded")
        assert count(client, project_id) == 10 * accepted  # every 202, nothing refused
        assert all(count(client, project_id, f"c{i}") == 10 for i in range(accepted))
        again = client.post("/api/collect", json=batch("after", 2), headers={"x-api-key": key})
        assert again.status_code == 202


def test_an_unwritable_data_directory_answers_503_and_acknowledges_nothing(make_client, caplog):
    # /proc refuses new files even to root: the log cannot be created there.
    with make_client(data_dir="/proc/self/tally-data") as client:
        project_id, key = new_project(client)
        response = client.post("/api/collect", json=batch("ro", 3), headers={"x-api-key": key})
        assert response.status_code == 503
        assert response.json() == {"error": "Storage unavailable"}
        assert "retry-after" in response.headers
        # The same through the Litestar route (a beacon's ?apiKey=): the log says why it
        # refuses; the HTTP layer does not log each refused request again.
        with caplog.at_level("WARNING", logger="tally.http"):
            beacon = client.post(f"/api/collect?apiKey={key}", json=batch("ro", 3))
        assert beacon.status_code == 503
        assert "storage unavailable on" not in caplog.text
        assert client.app.state.ingest.acknowledged == 0
        assert count(client, project_id) == 0
        # Reads still work; the health check says the log refuses (it answered 200, its
        # backlog all zeros, while every event was refused).
        dashboard = client.get(f"/api/dashboard?projectId={project_id}", headers=auth("alice"))
        assert dashboard.status_code == 200, dashboard.text
        health = client.get("/api/health")
        assert health.status_code == 503 and health.json() == {"error": "Storage unavailable"}
        live = client.get("/api/health/live").json()
        assert live["status"] == "ok" and live["backlog"]["refusedEvents"] == 6


def test_a_segment_written_before_a_schema_change_loads_after_it(make_client, tmp_path):
    """A segment of the Tally before schema 005 (17 columns) loads into today's table: named
    columns, the new ones take their defaults."""
    slot = tmp_path / "log" / "0"
    slot.mkdir(parents=True)
    project_id = "a" * 24
    at = 1_700_000_000.0
    rows = [old_row(project_id, at, f"/old{i}", "s") for i in range(3)]
    write_segment(slot / f"{0:012d}-{int(at * 1000)}.seg", COLUMNS_BEFORE_005, rows)
    with make_client() as client:
        client.load()
        got = stored(
            client,
            "SELECT path, source, country, is_bot FROM {db}.events "
            "WHERE project_id = {p:String} ORDER BY path",
            p=project_id,
        )
        assert got == [(f"/old{i}", "", "", 0) for i in range(3)]
        assert not list(slot.glob("*.seg"))  # deleted once stored
    assert set(COLUMNS_BEFORE_005) <= set(EVENT_COLUMNS)


def test_a_segment_loaded_twice_is_stored_once(make_client, tmp_path):
    """The INSERT's token names the segment: a crash after the INSERT and before the delete
    loads it again, and nothing is stored twice (events and rollups)."""
    project_id = "b" * 24
    at = time.time()
    rows = [old_row(project_id, at, "/twice", f"s{i}") for i in range(4)]
    first = tmp_path / "log" / "5"
    first.mkdir(parents=True)
    path = first / f"{0:012d}-{int(at * 1000)}.seg"
    write_segment(path, COLUMNS_BEFORE_005, rows)
    copy = tmp_path / "log" / "6"
    copy.mkdir()
    (copy / path.name).write_bytes(path.read_bytes())  # the same segment, left twice
    with make_client() as client:
        client.load()
        until(lambda: pending_since(tmp_path / "log") is None, "both copies to be loaded")
        assert count(client, project_id) == 4
        daily = stored(
            client,
            "SELECT sum(events) FROM {db}.events_daily WHERE project_id = {p:String}",
            p=project_id,
        )[0][0]
        assert daily == 4


def test_freshness_is_reported_while_events_wait_and_after_they_load(make_client):
    with make_client(log_seal_age_ms=3_600_000) as client:  # nothing seals by age in this test
        client.wait_for_load = False
        project_id, key = new_project(client)
        before = datetime.now(UTC).replace(microsecond=0)
        response = client.post("/api/collect", json=batch("f", 7), headers={"x-api-key": key})
        assert response.status_code == 202
        acked = datetime.now(UTC)
        waiting = backlog(client)
        assert (waiting["segments"], waiting["events"]) == (1, 7)
        assert waiting["acknowledgedEvents"] == 7  # since the worker started: on the log, 202
        assert waiting["bytes"] > 0
        assert waiting["oldestAgeSeconds"] is not None and waiting["oldestAgeSeconds"] >= 0
        dash = client.get(f"/api/dashboard?projectId={project_id}", headers=auth("alice")).json()
        through = datetime.fromisoformat(dash["dataThrough"])
        # Not loaded yet: the dashboard does not claim them, and indeed does not count them.
        assert before <= through <= acked
        assert dash["summary"]["totalEvents"] == 0
        client.load()
        loaded = backlog(client)
        assert (loaded["segments"], loaded["events"], loaded["bytes"]) == (0, 0, 0)
        assert loaded["oldestAgeSeconds"] is None
        assert loaded["loadedEvents"] >= 7 and loaded["inserts"] >= 1
        assert loaded["acknowledgedEvents"] == 7
        dash = client.get(f"/api/dashboard?projectId={project_id}", headers=auth("alice")).json()
        assert datetime.fromisoformat(dash["dataThrough"]) >= acked.replace(microsecond=0)
        assert dash["summary"]["totalEvents"] == 7


def test_the_idle_loader_wakes_when_a_new_segment_is_due_to_seal(make_client):
    """The bound from 202 to ClickHouse: an idle loader plans to wake exactly when the segment
    the event started is due (created + seal age), not at its next periodic look."""
    with make_client(log_seal_age_ms=5_000) as client:
        client.wait_for_load = False
        project_id, key = new_project(client)
        ingest, loader = client.app.state.ingest, client.app.state.loader
        response = client.post("/api/collect", json=batch("w", 2), headers={"x-api-key": key})
        assert response.status_code == 202
        segment = ingest.sealed()[0] if ingest.sealed() else ingest._active
        assert segment is not None
        due = segment.created_mono + 5.0
        until(lambda: backlog(client)["events"] == 0, "the segment to be sealed and loaded")
        assert any(abs(wake - due) < 1e-3 for wake in loader.planned_wakes), (
            due,
            list(loader.planned_wakes),
        )
        assert count(client, project_id) == 2


def test_noop_storage_acknowledges_without_storing(make_client, tmp_path):
    with make_client(bench_noop_storage=True) as client:
        client.wait_for_load = False
        project_id, key = new_project(client)
        response = client.post("/api/collect", json=batch("n", 3), headers={"x-api-key": key})
        assert response.status_code == 202
        assert count(client, project_id) == 0
        assert not list(Path(tmp_path).glob("log/*/*.seg"))


def test_a_stopping_service_loads_its_log(make_client, tmp_path):
    with make_client(log_seal_age_ms=3_600_000) as client:
        client.wait_for_load = False
        project_id, key = new_project(client)
        response = client.post("/api/collect", json=batch("s", 4), headers={"x-api-key": key})
        assert response.status_code == 202
        assert len(list(tmp_path.glob("log/*/*.seg"))) == 1
        settings = client.app.state.settings
    assert list(tmp_path.glob("log/*/*.seg")) == []  # loaded at shutdown, then deleted
    storage = Storage(parse_url(settings.storage_url, settings.clickhouse_database), 1)
    try:
        assert storage.query(
            f"SELECT count() FROM {storage.database}.events WHERE project_id = {{p:String}}",
            {"p": project_id},
        ) == [(4,)]
    finally:
        storage.close()


# A query that takes 3 s of the engine's time and no CPU: six blocks of one row, half a second
# each (the engine caps a sleep at 3 s per block).
SLOW_REPORT = "SELECT sum(sleepEachRow(0.5)) FROM numbers(6) SETTINGS max_block_size = 1"


def test_events_load_and_health_answers_while_reports_keep_every_thread_busy(make_client):
    """Dashboards and breakdowns run on a lane of their own (storage/client.py): while slow
    reports hold every thread of that lane, with more queued, and other work holds every thread
    of the event loop's default executor, an acknowledged event is still loaded and the health
    check still answers. Before, all three shared the default executor: the INSERT and the health
    check waited for the reports."""
    with make_client(clickhouse_pool_size=4, log_seal_age_ms=3_600_000) as client:
        client.wait_for_load = False
        project_id, key = new_project(client)
        storage = client.app.state.storage
        portal = client.blocking_portal
        lane = storage.report_threads
        reports = [portal.start_task_soon(storage.report, SLOW_REPORT) for _ in range(lane + 2)]
        release = threading.Event()

        async def hold_default_executor() -> None:
            await asyncio.gather(*(asyncio.to_thread(release.wait, 60) for _ in range(40)))

        held = portal.start_task_soon(hold_default_executor)
        try:
            response = client.post("/api/collect", json=batch("r", 5), headers={"x-api-key": key})
            assert response.status_code == 202
            client.load(timeout=60)
            health = client.get("/api/health")
            # Both answered while the reports were still running or waiting for a thread.
            pending = sum(not report.done() for report in reports)
            assert health.status_code == 200, health.text
            assert pending > 0, "the reports ended first: the test proved nothing"
        finally:
            release.set()
            held.result(timeout=60)
            assert [report.result(timeout=60) for report in reports] == [[(0,)]] * (lane + 2)
        assert count(client, project_id, "r") == 5


def test_a_segment_loaded_again_after_a_view_failed_gives_its_rollups_the_same_ids(
    make_client, tmp_path
):
    """An INSERT cut short after ``events`` stored its rows but before a rollup did (a kill -9
    between the two; here the rollup refuses rows for a while) is made again: ``events`` drops
    it as a copy, and the rollups missing it store it. Each event's id was given by the table
    when it was stored, so the second INSERT gave new ones: sessions_quarter's key of an event
    without a session id (a hash of the id) then matched no event, and every session filter
    left those events out, while the unfiltered numbers counted them (a helper's kill -9 test
    lost 20 of 40 events that way). The id is given at acceptance, in the ingest log."""
    fault = tmp_path / "fault"
    with make_client(fault_file=str(fault), load_retry_min_ms=10, load_retry_max_ms=50) as client:
        client.wait_for_load = False
        storage = client.app.state.storage
        project_id, key = new_project(client)
        # the table that stores the rows (in cluster mode the local one, behind a Distributed)
        table = f"{storage.database}.sessions_quarter{'_local' if storage.cluster else ''}"
        storage.command(f"ALTER TABLE {table} ADD CONSTRAINT refused CHECK 0")
        failures = client.app.state.loader.failures
        response = client.post(
            "/api/collect", json=batch("no-session", 12), headers={"x-api-key": key}
        )
        assert response.status_code == 202, response.text
        client.load_failure_seen(failures)
        storage.command(f"ALTER TABLE {table} DROP CONSTRAINT refused")
        client.load()
        assert count(client, project_id) == 12
        every = [["is_not", "source", ["nothing"]]]  # a session filter that keeps every event
        for filters in ([], every):
            params = {"projectId": project_id, "days": 1, "filters": json.dumps(filters)}
            got = client.get("/api/dashboard", params=params, headers=auth("alice"))
            assert got.status_code == 200, got.text
            assert got.json()["summary"]["totalEvents"] == 12, filters


# --- a log damaged or removed on disk while the service runs ------------------------------------


@contextlib.contextmanager
def in_an_outage(make_client, fault: Path) -> Iterator[tuple[Any, str, str]]:
    """A service whose INSERTs are refused while ``fault`` exists (made here), with one active
    segment until sealed by hand, and a project: (client, project id, key)."""
    with make_client(
        fault_file=str(fault), log_seal_age_ms=3_600_000, load_retry_min_ms=10
    ) as client:
        client.wait_for_load = False
        project_id, key = new_project(client)
        fault.write_text("fail")
        yield client, project_id, key


def _segment_files(client) -> list[Path]:
    return sorted(Path(client.app.state.ingest.root).glob("*/*.seg"))


def _seal(client) -> None:
    client.blocking_portal.call(lambda: client.app.state.ingest.seal(force=True))


def test_a_segment_damaged_on_disk_before_its_load_keeps_a_copy_and_says_so(
    make_client, tmp_path, caplog
):
    """A byte changed in a sealed segment (a disk, a hand) during an outage: the loader loaded
    the records before it, deleted the file and said nothing; the 20 acknowledged events after
    it were gone without a trace. Now the whole file is kept and an error names it."""
    fault = tmp_path / "fault"
    with in_an_outage(make_client, fault) as (client, project_id, key):
        for i in range(3):  # three commits: three records of one segment
            answer = client.post(
                "/api/collect", json=batch(f"d{i}", 10), headers={"x-api-key": key}
            )
            assert answer.status_code == 202
        _seal(client)
        [path] = _segment_files(client)
        original = path.read_bytes()
        records = read_segment(path).records
        assert [rows for _, rows, _ in records] == [10, 10, 10]
        # One byte of the second record's rows changed: the first loads, the rest cannot.
        data = bytearray(original)
        data[len(original) - len(records[2][2]) - FRAME.size - RECORD.size - 40] ^= 0xFF
        # Replaced whole, at once: the retrying loader never reads a file half written.
        changed = path.with_name("changed")
        changed.write_bytes(bytes(data))
        changed.replace(path)
        with caplog.at_level("ERROR", logger="tally.ingestlog"):
            failed = client.app.state.loader.failures
            until(lambda: client.app.state.loader.failures >= failed + 3, "retries in the outage")
            fault.unlink()
            until(lambda: backlog(client)["events"] == 0, "the segment to be taken")
        assert caplog.text.count("is damaged at byte") == 1  # said once, not at every retry
        until(lambda: count(client, project_id, "d0") == 10, "the readable record stored")
        assert count(client, project_id) == 10
        kept = Path(client.app.state.ingest.root).parent / "log-damaged" / f"0-{path.name}.damaged"
        assert kept.read_bytes() == bytes(data)
        # the second record starts where the first ends: the damage is said from there
        first_end = (
            len(original)
            - 2 * (FRAME.size + RECORD.size)
            - sum(len(payload) for _, _, payload in records[1:])
        )
        assert f"is damaged at byte {first_end} of {len(original)}" in caplog.text
        assert str(kept) in caplog.text and "may hold acknowledged events" in caplog.text


def test_a_log_folder_deleted_while_in_use_keeps_what_it_can_and_names_what_was_lost(
    make_client, tmp_path, caplog
):
    """The log's folder removed by hand: events were fsynced into a file with no name and
    answered 202 (lost, with those the open file held), the loader retried a vanished file
    forever and held every later segment back, and new segments could not be begun until the
    folder was made by hand."""
    fault = tmp_path / "fault"
    with in_an_outage(make_client, fault) as (client, project_id, key):
        first = client.post("/api/collect", json=batch("before", 5), headers={"x-api-key": key})
        assert first.status_code == 202
        [path] = _segment_files(client)
        shutil.rmtree(path.parent)
        with caplog.at_level("ERROR"):
            # Its segment's file has no name left: refused, nothing of it acknowledged; what it
            # held is written again from the open file, in the folder made again.
            refused = client.post("/api/collect", json=batch("gone", 5), headers={"x-api-key": key})
            assert refused.status_code == 503
            assert read_segment(path).events == 5
            # The next begins a segment there.
            after = client.post("/api/collect", json=batch("after", 5), headers={"x-api-key": key})
            assert after.status_code == 202
            _seal(client)
            # A sealed segment deleted by hand is lost: dropped, and said, not retried forever.
            lost = client.post("/api/collect", json=batch("lost", 5), headers={"x-api-key": key})
            assert lost.status_code == 202
            _seal(client)
            newest = _segment_files(client)[-1]
            assert read_segment(newest).body().count(b'"lost"') == 5
            newest.unlink()
            fault.unlink()
            until(lambda: count(client, project_id, "after") == 5, "the later segment")
            until(lambda: backlog(client)["segments"] == 0, "the vanished segment dropped")
        until(lambda: count(client, project_id, "before") == 5, "the segment written again")
        assert count(client, project_id) == 10
        assert "its 5 acknowledged events were written again from the open file" in caplog.text
        assert "is gone from disk before it was loaded: its 5 acknowledged events" in caplog.text


def test_a_segment_whose_deletion_fails_is_not_stored_again(make_client):
    """A segment stored, then its file could not be deleted (a read-only folder): every retry
    INSERTed it again (deduplicated, but counted each time in health's counters)."""
    with make_client(load_retry_min_ms=10) as client:
        client.wait_for_load = False
        project_id, key = new_project(client)
        ingest, loader = client.app.state.ingest, client.app.state.loader
        refused: list[Path] = []
        delete = ingest.delete_file

        def read_only_once(segment) -> None:  # the folder read-only for one attempt
            if not refused:
                refused.append(segment.path)
                raise OSError(30, "Read-only file system")
            delete(segment)

        ingest.delete_file = read_only_once
        insert = loader._insert
        inserted: list[str] = []
        loader._insert = lambda columns, body, token: (
            inserted.append(token),
            insert(columns, body, token),
        )[1]
        inserts, loaded = loader.inserts, loader.loaded_events
        answer = client.post("/api/collect", json=batch("ro", 7), headers={"x-api-key": key})
        assert answer.status_code == 202
        until(lambda: refused and backlog(client)["segments"] == 0, "the retried deletion")
        assert not refused[0].exists()
        assert count(client, project_id) == 7
        assert len(inserted) == 1  # the retry deleted it, and stored nothing again
        assert loader.inserts - inserts == 1 and loader.loaded_events - loaded == 7

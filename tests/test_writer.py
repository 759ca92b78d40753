"""Group commit: few INSERTs for many requests, 202 only once stored, 503 when storage fails."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import new_project, stored
from tally.storage.writer import BatchWriter, StorageUnavailable, events_inserter


def batch(marker: str, n: int) -> dict:
    return {
        "events": [{"name": "pageview", "path": f"/{i}", "visitorId": marker} for i in range(n)]
    }


def event_row(
    project_id: str,
    name: str = "e",
    path: str = "",
    referrer: str = "",
    session: str = "",
    visitor: str = "",
) -> tuple:
    """A row in the writer's column order (storage.writer.EVENT_COLUMNS)."""
    at = 1_700_000_000.0
    return (
        project_id,
        name,
        at,
        at,
        path,
        "",
        referrer,
        session,
        visitor,
        "Chrome",
        "Linux",
        "desktop",
        None,
        "{}",
        "127.0.0.1",
        "ua",
        "k",
    )


def stored_for(client, project_id: str, marker: str) -> int:
    return stored(
        client,
        "SELECT count() FROM {db}.events WHERE project_id = {p:String} AND visitor_id = {m:String}",
        p=project_id,
        m=marker,
    )[0][0]


def test_concurrent_requests_share_inserts_and_are_readable_once_acknowledged(make_client):
    with make_client(batch_max_delay_ms=20) as client:
        project_id, key = new_project(client)
        writer = client.app.state.writer
        batches_before = writer.batches

        def send(i: int) -> tuple[int, int, int]:
            marker = f"m{i}"
            response = client.post(
                "/api/collect", json=batch(marker, 10), headers={"x-api-key": key}
            )
            # Acknowledged means stored: the events are readable the moment the 202 arrives.
            return response.status_code, stored_for(client, project_id, marker), i

        with ThreadPoolExecutor(max_workers=40) as pool:
            results = list(pool.map(send, range(120)))
        assert all(code == 202 for code, _, _ in results)
        assert all(seen == 10 for _, seen, _ in results), results
        inserts = writer.batches - batches_before
        assert inserts <= 40, f"{inserts} INSERTs for 120 requests"
        assert (
            stored(
                client,
                "SELECT count() FROM {db}.events WHERE project_id = {p:String}",
                p=project_id,
            )[0][0]
            == 1200
        )


def test_storage_failure_answers_503_and_acknowledges_nothing(make_client):
    with make_client(insert_attempts=2, insert_retry_backoff_ms=5) as client:
        project_id, key = new_project(client)
        db = client.app.state.storage.database
        client.app.state.storage.command(f"RENAME TABLE {db}.events TO {db}.events_away")
        try:
            with ThreadPoolExecutor(max_workers=8) as pool:
                responses = list(
                    pool.map(
                        lambda i: client.post(
                            "/api/collect", json=batch(f"f{i}", 5), headers={"x-api-key": key}
                        ),
                        range(16),
                    )
                )
            assert {r.status_code for r in responses} == {503}
            assert all(r.json() == {"error": "Storage unavailable"} for r in responses)
            assert all("retry-after" in r.headers for r in responses)
        finally:
            client.app.state.storage.command(f"RENAME TABLE {db}.events_away TO {db}.events")
        # Nothing from the failed batches was stored, and ingest recovers by itself.
        assert (
            stored(
                client,
                "SELECT count() FROM {db}.events WHERE project_id = {p:String}",
                p=project_id,
            )[0][0]
            == 0
        )
        ok = client.post("/api/collect", json=batch("after", 3), headers={"x-api-key": key})
        assert ok.status_code == 202
        assert stored_for(client, project_id, "after") == 3
        rollup = stored(
            client,
            "SELECT sum(events) FROM {db}.events_daily WHERE project_id = {p:String}",
            p=project_id,
        )[0][0]
        assert rollup == 3


def test_retried_insert_with_the_same_token_stores_nothing_twice(client):
    """An INSERT whose answer was lost is retried with its token: events and rollups dedupe."""
    storage = client.app.state.storage
    insert = events_inserter(storage)
    project_id = uuid.uuid4().hex[:24]
    row = event_row(
        project_id, name="pageview", path="/x", referrer="ref", session="s1", visitor="v1"
    )
    token = uuid.uuid4().hex
    insert([row, row], token)
    insert([row, row], token)  # the retry
    assert (
        storage.query(
            f"SELECT count() FROM {storage.database}.events WHERE project_id = {{p:String}}",
            {"p": project_id},
        )[0][0]
        == 2
    )
    for table, column in [
        ("events_daily", "events"),
        ("events_hourly", "events"),
        ("paths_daily", "views"),
        ("referrers_daily", "views"),
        ("clients_daily", "events"),
        ("visitors_daily", "events"),
        ("sessions_daily", "events"),
    ]:
        total = storage.query(
            f"SELECT sum({column}) FROM {storage.database}.{table} WHERE project_id = {{p:String}}",
            {"p": project_id},
        )[0][0]
        assert total == 2, table
    insert([row], uuid.uuid4().hex)  # a different token is a different batch
    assert (
        storage.query(
            f"SELECT count() FROM {storage.database}.events WHERE project_id = {{p:String}}",
            {"p": project_id},
        )[0][0]
        == 3
    )


def test_stop_flushes_the_buffer_and_refuses_new_writes(client):
    storage = client.app.state.storage
    project_id = uuid.uuid4().hex[:24]
    row = event_row(project_id)

    async def scenario() -> None:
        writer = BatchWriter(events_inserter(storage), max_events=10_000, max_delay=60.0)
        writer.start()
        pending = asyncio.ensure_future(writer.write([row] * 5))
        await asyncio.sleep(0.05)
        assert not pending.done()  # waiting for the 60 s age bound
        await writer.stop()  # shutdown flushes without waiting for it
        await pending
        with pytest.raises(StorageUnavailable):
            await writer.write([row])

    asyncio.run(scenario())
    assert (
        storage.query(
            f"SELECT count() FROM {storage.database}.events WHERE project_id = {{p:String}}",
            {"p": project_id},
        )[0][0]
        == 5
    )


def test_size_bound_flushes_before_the_age_bound(client):
    storage = client.app.state.storage
    project_id = uuid.uuid4().hex[:24]
    row = event_row(project_id)

    async def scenario() -> None:
        writer = BatchWriter(events_inserter(storage), max_events=50, max_delay=60.0)
        writer.start()
        await asyncio.wait_for(asyncio.gather(*(writer.write([row] * 10) for _ in range(5))), 10)
        assert writer.batches == 1
        await writer.stop()

    asyncio.run(scenario())


def test_reads_answer_503_while_storage_fails(make_client):
    with make_client() as client:
        from conftest import auth

        project_id, _ = new_project(client, user="reader")
        db = client.app.state.storage.database
        # Ownership, once known, is remembered: the dashboard and key list fail on their own reads.
        away = ("projects", "sessions_daily", "api_keys")
        for table in away:
            client.app.state.storage.command(f"RENAME TABLE {db}.{table} TO {db}.{table}_away")
        try:
            for url in (
                "/api/projects",
                f"/api/dashboard?projectId={project_id}",
                f"/api/projects/keys?projectId={project_id}",
            ):
                response = client.get(url, headers=auth("reader"))
                assert (response.status_code, response.json()) == (
                    503,
                    {"error": "Storage unavailable"},
                ), url
        finally:
            for table in away:
                client.app.state.storage.command(f"RENAME TABLE {db}.{table}_away TO {db}.{table}")
        assert client.get("/api/projects", headers=auth("reader")).status_code == 200
        assert (
            client.get(f"/api/dashboard?projectId={project_id}", headers=auth("reader")).status_code
            == 200
        )


def test_overload_sheds_instead_of_buffering_without_bound(client):
    """Past its buffer limit the writer refuses at once (503) rather than growing memory."""
    from tally.storage.writer import Overloaded

    storage = client.app.state.storage
    project_id = uuid.uuid4().hex[:24]

    async def scenario() -> None:
        writer = BatchWriter(
            events_inserter(storage), max_events=10_000, max_delay=60.0, buffer_limit=50
        )
        writer.start()
        waiting = asyncio.ensure_future(writer.write([event_row(project_id)] * 40))
        await asyncio.sleep(0.05)
        with pytest.raises(Overloaded):
            await writer.write([event_row(project_id)] * 20)
        # Refused at once: before the buffered batch (held for max_delay=60 s) was even sent.
        assert not waiting.done()
        await writer.stop()
        await waiting  # what was accepted is still stored

    asyncio.run(scenario())
    assert (
        storage.query(
            f"SELECT count() FROM {storage.database}.events WHERE project_id = {{p:String}}",
            {"p": project_id},
        )[0][0]
        == 40
    )


def test_buffer_is_bounded_in_bytes_too(client):
    from tally.storage.writer import Overloaded

    storage = client.app.state.storage
    project_id = uuid.uuid4().hex[:24]

    async def scenario() -> None:
        writer = BatchWriter(
            events_inserter(storage),
            max_events=10_000,
            max_delay=60.0,
            buffer_limit=10_000,
            buffer_limit_bytes=1_000,
        )
        writer.start()
        waiting = asyncio.ensure_future(writer.write([event_row(project_id)], size=800))
        await asyncio.sleep(0.05)
        with pytest.raises(Overloaded):
            await writer.write([event_row(project_id)], size=300)
        small = asyncio.ensure_future(writer.write([event_row(project_id)], size=100))
        await asyncio.sleep(0.05)
        await writer.stop()
        await asyncio.gather(waiting, small)

    asyncio.run(scenario())
    assert (
        storage.query(
            f"SELECT count() FROM {storage.database}.events WHERE project_id = {{p:String}}",
            {"p": project_id},
        )[0][0]
        == 2
    )

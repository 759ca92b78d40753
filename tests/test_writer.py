"""The INSERT of event rows: a retry with the same token stores nothing twice; reads answer 503
while storage fails. The ingest path around it (log, loader, 202): tests/test_loader.py."""

from __future__ import annotations

import uuid

from conftest import new_project, stored
from tally.storage.writer import events_inserter


def batch(marker: str, n: int) -> dict:
    return {
        "events": [{"name": "pageview", "path": f"/{i}", "visitorId": marker} for i in range(n)]
    }


# source, channel, utm_source, utm_medium, utm_campaign, utm_content, utm_term, country, is_bot
DIMENSIONS = ("Direct / None", "Direct", "", "", "", "", "", "Unknown", 0)


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
        *DIMENSIONS,
    )


def stored_for(client, project_id: str, marker: str) -> int:
    return stored(
        client,
        "SELECT count() FROM {db}.events WHERE project_id = {p:String} AND visitor_id = {m:String}",
        p=project_id,
        m=marker,
    )[0][0]


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
        ("session_days", "events"),
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


def test_reads_answer_503_while_storage_fails(make_client):
    with make_client() as client:
        from conftest import auth

        project_id, _ = new_project(client, user="reader")
        db = client.app.state.storage.database
        # Ownership, once known, is remembered: the dashboard and key list fail on their own reads.
        away = ("projects", "session_days", "api_keys")
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

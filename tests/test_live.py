"""GET /api/live: the dashboard's live visitors on their own, against the reference model
(tests/reference.py): the 5-minute edge, bots by the project's rule, events without a visitor
id, other tenants, and the same auth and errors as the dashboard."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from conftest import auth, new_project
from reference import Sent, live_visitors
from tally.storage.live import live_visitors as fetch_live
from test_local_time import store


def recent(now: datetime) -> list[Sent]:
    """Visitors on both sides of the 5-minute edge, a bot, and events with no visitor id."""
    at = lambda seconds: now - timedelta(seconds=seconds)  # noqa: E731
    return [
        Sent("pageview", at(10), "/", visitor_id="v1"),
        Sent("click", at(20), "/", visitor_id="v1"),
        Sent("pageview", at(299), "/a", visitor_id="v2"),  # just inside
        Sent("pageview", at(300), "/b", visitor_id="v3"),  # on the edge: inside
        Sent("pageview", at(301), "/c", visitor_id="v4"),  # just outside
        Sent("pageview", at(3600), "/d", visitor_id="v5"),
        Sent("pageview", at(30), "/e", visitor_id="crawler", is_bot=True),
        Sent("pageview", at(40), "/f"),  # no visitor id: not a visitor
    ]


def test_live_visitors_match_the_reference_at_the_edge(client):
    project_id, _ = new_project(client)
    now = datetime.now(UTC).replace(microsecond=0)
    events = recent(now)
    store(client, project_id, events)
    other, _ = new_project(client, user="bob")
    store(client, other, [Sent("pageview", now - timedelta(seconds=5), "/", visitor_id="x")])
    storage = client.app.state.storage
    for bots in (True, False):
        got = asyncio.run(fetch_live(storage, project_id, now, exclude_bots=bots))
        assert got == live_visitors(events, now, bots)
    assert live_visitors(events, now, True) == 3  # v1, v2, v3: the test is not vacuous
    assert live_visitors(events, now, False) == 4  # and the crawler


def test_live_over_http_follows_the_projects_bot_rule(client):
    project_id, _ = new_project(client)
    now = datetime.now(UTC).replace(microsecond=0)
    # Well inside or outside the window: the request's own clock is a little later.
    events = [
        Sent("pageview", now - timedelta(seconds=30), "/", visitor_id="a"),
        Sent("pageview", now - timedelta(seconds=60), "/", visitor_id="b"),
        Sent("pageview", now - timedelta(seconds=40), "/", visitor_id="bot", is_bot=True),
        Sent("pageview", now - timedelta(minutes=20), "/", visitor_id="c"),
    ]
    store(client, project_id, events)
    url = f"/api/live?projectId={project_id}"
    response = client.get(url, headers=auth("alice"))
    assert response.status_code == 200, response.text
    assert response.json() == {"liveVisitors": 2, "windowSeconds": 300}
    # The dashboard says the same.
    dash = client.get(f"/api/dashboard?projectId={project_id}&days=1", headers=auth("alice"))
    assert dash.json()["liveVisitors"] == 2
    patched = client.patch(
        "/api/projects", json={"projectId": project_id, "excludeBots": False}, headers=auth("alice")
    )
    assert patched.status_code == 200, patched.text
    assert client.get(url, headers=auth("alice")).json()["liveVisitors"] == 3


def test_live_of_another_users_project_is_not_found(client):
    project_id, _ = new_project(client)
    response = client.get(f"/api/live?projectId={project_id}", headers=auth("eve"))
    assert response.status_code == 404 and response.json() == {"error": "Project not found"}
    assert client.get(f"/api/live?projectId={project_id}").status_code == 401


@pytest.mark.parametrize("query", ["", "?projectId=nope", "?projectId=" + "A" * 24])
def test_bad_live_queries_are_refused(client, query):
    response = client.get(f"/api/live{query}", headers=auth("alice"))
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "Invalid query"


def test_live_is_in_the_api_document(client):
    operation = client.get("/api/schema/openapi.json").json()["paths"]["/api/live"]["get"]
    assert operation["summary"].startswith("A project's live visitors")
    assert {"400", "401", "404", "429", "503"} <= set(operation["responses"])

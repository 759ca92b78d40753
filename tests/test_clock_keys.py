"""Key revocations when the wall clock is set back while the workers run (an NTP correction): the
revoking worker refuses the key at once, the others at their next refresh (README: "401 at once on
this worker, on the others within TALLY_KEY_REFRESH_SECONDS"). The clocks are injected: the
revocation's time stamp (``utcnow``) and the version source's ``time``."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from types import SimpleNamespace

import pytest

import tally.domain.ids as ids
import tally.storage.projects as projects
from conftest import auth, new_project
from tally.domain.ids import hash_key
from tally.storage.keys import KeyRegistry
from tally.storage.projects import ProjectStore

HOUR = 3600


def set_clock_back(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Rows written from now on are stamped by a wall clock ``seconds`` earlier."""
    real_utcnow = ids.utcnow
    monkeypatch.setattr(projects, "utcnow", lambda: real_utcnow() - timedelta(seconds=seconds))
    shifted = SimpleNamespace(
        time=lambda: time.time() - seconds, time_ns=lambda: time.time_ns() - int(seconds * 1e9)
    )
    monkeypatch.setattr(ids, "time", shifted)


def collect(client, key: str) -> int:
    body = {"events": [{"name": "pageview", "path": "/x"}]}
    return client.post("/api/collect", json=body, headers={"x-api-key": key}).status_code


def test_a_key_revoked_here_after_the_clock_was_set_back_is_refused_at_once(
    client, user, monkeypatch
):
    project_id, _ = new_project(client, user=user)
    made = client.post(
        "/api/projects/keys", json={"projectId": project_id, "label": "B"}, headers=auth(user)
    ).json()
    assert collect(client, made["apiKey"]) == 202  # known and live here
    set_clock_back(monkeypatch, HOUR)
    revoked = client.delete(
        f"/api/projects/keys?projectId={project_id}&keyId={made['id']}", headers=auth(user)
    )
    assert revoked.status_code == 204
    assert collect(client, made["apiKey"]) == 401


def test_a_revocation_elsewhere_after_the_clock_was_set_back_reaches_this_worker(
    make_client, monkeypatch
):
    """The exploratory test's s_revoke_inprocess.py across two workers: key B is made, another
    key later, then the clock steps back an hour and B is revoked by the other worker. This
    worker's next refresh must drop B (it asked only for keys changed since its last refresh's
    newest updated_at, an hour ahead of the revocation's)."""
    with make_client() as client:
        storage = client.app.state.storage
        here = KeyRegistry(ProjectStore(storage))  # this worker's registry, refreshed by hand
        elsewhere = ProjectStore(storage)  # the worker that revokes
        project_id, _ = new_project(client, user="owner")
        key_b, record_b = elsewhere.create_key(project_id, "B")

        async def scenario() -> None:
            await here.refresh()
            assert here.cached(hash_key(key_b)) is not None
            # a later key (35 s later in the exploratory test) moves this worker's watermark
            monkeypatch.setattr(projects, "utcnow", lambda: ids.utcnow() + timedelta(seconds=35))
            elsewhere.create_key(project_id, "C")
            await here.refresh()
            monkeypatch.undo()
            set_clock_back(monkeypatch, HOUR)
            assert elsewhere.revoke_key(project_id, record_b.id) is not None
            await here.refresh()

        asyncio.run(scenario())
        assert here.cached(hash_key(key_b)) is None

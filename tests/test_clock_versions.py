"""Row versions when the wall clock is set back (an NTP correction, a VM restored): a key's
revocation, a project's PATCH and a deletion's key revocations must outrank the rows they replace,
in this process and after a restart. The clock is injected (the version source's ``time``), never
waited for."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

import tally.domain.ids as ids
from conftest import auth, make_settings, new_project, running, stored
from tally.storage.projects import ProjectStore

DAY_NS = 86_400 * 10**9


def set_clock_back(monkeypatch: pytest.MonkeyPatch, ns: int) -> None:
    """The version source reads a wall clock ``ns`` earlier than the real one."""
    shifted = SimpleNamespace(
        time=lambda: time.time() - ns / 1e9, time_ns=lambda: time.time_ns() - ns
    )
    monkeypatch.setattr(ids, "time", shifted)


def new_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a restarted process knows of versions: nothing."""
    monkeypatch.setattr(ids, "_last_version", 0)


def collect(client: Any, key: str) -> int:
    body = {"events": [{"name": "pageview", "path": "/x"}]}
    return client.post("/api/collect", json=body, headers={"x-api-key": key}).status_code


def key_id(client: Any, user: str, project_id: str, label: str) -> str:
    keys = client.get(f"/api/projects/keys?projectId={project_id}", headers=auth(user)).json()
    return next(k["id"] for k in keys["keys"] if k["label"] == label)


def test_writes_after_the_clock_was_set_back_outrank_the_rows_they_replace(
    client, user, monkeypatch
):
    """A worker that started with its clock a day earlier and has read no versions yet (its key
    refresh not run): the revocation, PATCH and deletion revocations it writes still win."""
    project_id, _ = new_project(client, user=user)
    extra = client.post(
        "/api/projects/keys", json={"projectId": project_id, "label": "extra"}, headers=auth(user)
    ).json()
    client.post(
        "/api/projects/keys", json={"projectId": project_id, "label": "later"}, headers=auth(user)
    ).json()
    store = ProjectStore(client.app.state.storage)  # the other worker's
    new_process(monkeypatch)
    set_clock_back(monkeypatch, DAY_NS)
    # its refresh never ran: it follows no stored version
    monkeypatch.setattr("tally.storage.projects.follow_version", lambda seen: None, raising=False)

    assert store.revoke_key(project_id, extra["id"]) is not None
    assert store.update_project(user, project_id, name="Renamed") is not None
    assert len(store.revoke_project_keys(project_id)) == 2  # Default and later

    keys = stored(
        client,
        "SELECT label, revoked_at IS NOT NULL FROM {db}.api_keys FINAL "
        "WHERE project_id = {p:String} ORDER BY label",
        p=project_id,
    )
    assert keys == [("Default", True), ("extra", True), ("later", True)]
    assert store.get_project(user, project_id).name == "Renamed"


def test_revocations_patches_and_deletions_survive_a_restart_with_the_clock_set_back(
    chdb_path, tmp_path, monkeypatch
):
    """The exploratory test's finding (repro_restart_back.sh): one run makes the projects and
    keys; the next starts with the clock a day earlier and revokes a key, renames one project and
    deletes another, all answered 204/200; the run after that must still refuse both keys and
    list the project renamed and not the deleted one. (They came back: the rows were written
    with lower versions than the ones they replaced.)"""
    settings = make_settings(chdb_path, tmp_path, key_refresh_seconds=0.2)
    user = "restarter"
    with running(settings) as first:
        kept_id, _ = new_project(first, user=user, name="Kept")
        gone_id, gone_key = new_project(first, user=user, name="Gone")
        made = first.post(
            "/api/projects/keys", json={"projectId": kept_id, "label": "B"}, headers=auth(user)
        ).json()
        assert collect(first, made["apiKey"]) == 202
        assert collect(first, gone_key) == 202

    new_process(monkeypatch)
    set_clock_back(monkeypatch, DAY_NS)
    with running(settings) as second:
        revoked = second.delete(
            f"/api/projects/keys?projectId={kept_id}&keyId={made['id']}", headers=auth(user)
        )
        assert revoked.status_code == 204
        assert collect(second, made["apiKey"]) == 401  # at once
        patched = second.patch(
            "/api/projects", json={"projectId": kept_id, "name": "Renamed"}, headers=auth(user)
        )
        assert (patched.status_code, patched.json()["name"]) == (200, "Renamed")
        deleted = second.delete(f"/api/projects?projectId={gone_id}", headers=auth(user))
        assert deleted.status_code == 204
        assert collect(second, gone_key) == 401

    new_process(monkeypatch)  # the clock stays a day back
    with running(settings) as third:
        assert collect(third, made["apiKey"]) == 401
        assert collect(third, gone_key) == 401
        listed = third.get("/api/projects", headers=auth(user)).json()["projects"]
        assert [(p["id"], p["name"]) for p in listed] == [(kept_id, "Renamed")]
        assert key_id(third, user, kept_id, "Default")  # the kept project's Default is live
        assert stored(
            third, "SELECT count() FROM {db}.events WHERE project_id = {p:String}", p=gone_id
        ) == [(0,)]

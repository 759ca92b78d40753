"""API keys across processes: two apps on one database stand for two Tally workers."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from conftest import auth, make_settings, new_project, running


def collect(client, key):
    return client.post("/api/collect", json={"events": [{"name": "a"}]}, headers={"x-api-key": key})


def test_key_created_and_revoked_by_another_worker(chdb_path, tmp_path):
    settings = make_settings(chdb_path, tmp_path, key_refresh_seconds=0.5)
    with running(settings) as one, running(settings) as two:
        project_id, key = new_project(one, user="owner")
        # Worker two has never seen the key: an unknown key triggers an early refresh.
        assert collect(two, key).status_code == 202
        key_id = one.get(
            f"/api/projects/keys?projectId={project_id}", headers=auth("owner")
        ).json()["keys"][0]["id"]
        assert (
            one.delete(
                f"/api/projects/keys?projectId={project_id}&keyId={key_id}", headers=auth("owner")
            ).status_code
            == 204
        )
        assert collect(one, key).status_code == 401  # at once where it was revoked
        deadline = time.monotonic() + 5
        while collect(two, key).status_code == 202:
            assert time.monotonic() < deadline, "revocation did not reach the other worker in 5 s"
            time.sleep(0.1)
        assert collect(two, key).json() == {"error": "Invalid API key"}


def test_invalid_keys_do_not_cost_a_query_each(client):
    """A flood of invalid keys shares refreshes: at most one per miss interval."""
    registry = client.app.state.registry
    before = registry.refreshes
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=50) as pool:
        codes = list(pool.map(lambda i: collect(client, f"tk_invalid-{i}").status_code, range(300)))
    elapsed = time.monotonic() - started
    assert codes == [401] * 300
    assert registry.refreshes - before <= elapsed / registry.miss_interval + 2


def test_last_used_is_written_in_batches(make_client):
    interval = 0.5
    with make_client(last_used_flush_seconds=interval) as client:
        project_id, key = new_project(client, user="owner")
        started = time.monotonic()
        for _ in range(30):
            assert collect(client, key).status_code == 202
        time.sleep(interval * 2)
        elapsed = time.monotonic() - started
        storage = client.app.state.storage
        rows = storage.query(
            f"SELECT count() FROM {storage.database}.api_key_usage WHERE project_id = {{p:String}}",
            {"p": project_id},
        )[0][0]
        # One row per flush that had something to write, not one per request.
        assert 1 <= rows <= elapsed / interval + 1 < 30

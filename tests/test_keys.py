"""API keys across processes: two apps on one database stand for two Tally workers."""

from __future__ import annotations

import asyncio
import itertools
import time

from conftest import auth, make_settings, new_project, running
from tally.storage.keys import KeyRegistry


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
        # Waits for the event, not for a time: the patience is far beyond any refresh interval.
        deadline = time.monotonic() + 60
        while collect(two, key).status_code == 202:
            assert time.monotonic() < deadline, "revocation never reached the other worker"
            time.sleep(0.1)
        assert collect(two, key).json() == {"error": "Invalid API key"}


class FakeClock:
    """A clock that moves only when told to, or when the code under test sleeps on it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


def test_invalid_keys_do_not_cost_a_query_each(client):
    """A flood of invalid keys shares refreshes: at most one per miss interval, by the registry's
    own clock (injected here, so the verdict does not depend on how fast the machine is)."""
    clock = FakeClock()
    store = client.app.state.store
    reads: list[float] = []

    class CountingStore:
        def key_changes(self, since):
            reads.append(clock())
            return store.key_changes(since)

    registry = KeyRegistry(CountingStore(), miss_interval=0.5, clock=clock, sleep=clock.sleep)

    async def flood() -> list[object]:
        await registry.refresh()  # the start-up read
        found = []
        for wave in range(6):  # 6 waves of 50 concurrent misses, 0.1 s apart
            found += await asyncio.gather(
                *(registry.resolve(f"unknown-{wave}-{i}") for i in range(50))
            )
            clock.now += 0.1
        return found

    assert asyncio.run(flood()) == [None] * 300
    gaps = [b - a for a, b in itertools.pairwise(reads)]
    assert all(gap >= 0.5 for gap in gaps), gaps  # never two reads within the miss interval
    elapsed = clock() - reads[0]
    assert len(reads) - 1 <= elapsed / 0.5  # 300 misses, a handful of reads
    assert len(reads) - 1 == 6  # each wave shares one read


def test_last_used_is_written_in_batches(chdb_path, tmp_path):
    # No periodic flush during the test: the writes counted are the ones the code chose to make.
    settings = make_settings(chdb_path, tmp_path, last_used_flush_seconds=3600)

    def usage_rows(client, project_id):
        storage = client.app.state.storage
        return storage.query(
            f"SELECT count() FROM {storage.database}.api_key_usage WHERE project_id = {{p:String}}",
            {"p": project_id},
        )[0][0]

    with running(settings) as client:
        project_id, key = new_project(client, user="owner")
        for _ in range(30):
            assert collect(client, key).status_code == 202
        assert usage_rows(client, project_id) == 0  # held in memory, not one write per request
    # Stopping flushes once: one row for the thirty uses.
    with running(settings) as client:
        assert usage_rows(client, project_id) == 1


def test_a_stale_refresh_does_not_bring_a_revoked_key_back():
    """A refresh that read a key before it was revoked, applied after the revocation (the
    suite once saw a revoked key accepted under load), leaves the key revoked."""
    from datetime import UTC, datetime, timedelta

    from tally.storage.projects import KeyRecord

    registry = KeyRegistry(store=None)  # type: ignore[arg-type]  # apply() needs no storage
    made = datetime(2026, 11, 23, 10, tzinfo=UTC)
    live = KeyRecord(id="k", project_id="p", key_hash="h", revoked=False, updated_at=made)
    revoked = KeyRecord(
        id="k", project_id="p", key_hash="h", revoked=True, updated_at=made + timedelta(seconds=1)
    )
    registry.apply(live)
    assert "h" in registry._live
    registry.apply(revoked)  # this process revoked it
    registry.apply(live)  # the stale read lands
    assert "h" not in registry._live


def test_an_unknown_key_while_the_keys_cannot_be_read_is_told_to_retry(client, monkeypatch):
    """Not known here and not readable (ClickHouse away): the key may be a real one created
    moments ago on another worker, so the answer is 503 with Retry-After, which the tracker
    retries, not 401, for which it drops the events."""
    from tally.storage.client import StorageUnavailable

    _, key = new_project(client, user="keys-outage")
    store = client.app.state.registry.store

    def unreadable(since):
        raise StorageUnavailable("ClickHouse does not answer")

    monkeypatch.setattr(store, "key_changes", unreadable)
    unknown = client.post(
        "/api/collect", json={"events": [{"name": "a"}]}, headers={"x-api-key": "tk_" + "b" * 40}
    )
    assert (unknown.status_code, unknown.json()) == (503, {"error": "Storage unavailable"})
    assert int(unknown.headers["retry-after"]) >= 1
    # a key this worker knows is taken without reading anything
    body = {"events": [{"name": "a"}]}
    known = client.post("/api/collect", json=body, headers={"x-api-key": key})
    assert known.status_code == 202


def test_a_revoked_key_is_refused_at_once_without_reading_the_keys(client, monkeypatch):
    """Revocations are final: a key this worker knows revoked (a deleted project's, whose
    trackers keep sending) gets its 401 without waiting for a refresh or costing a read, even
    while the keys cannot be read (a 503 there would have its trackers retry forever)."""
    user = "keys-revoked"
    project_id, key = new_project(client, user=user)
    keys = client.get(f"/api/projects/keys?projectId={project_id}", headers=auth(user))
    key_id = keys.json()["keys"][0]["id"]
    revoke = f"/api/projects/keys?projectId={project_id}&keyId={key_id}"
    assert client.delete(revoke, headers=auth(user)).status_code == 204
    store = client.app.state.registry.store
    reads: list[object] = []

    def unreadable(since):
        reads.append(since)
        raise AssertionError("a revoked key read the keys")

    monkeypatch.setattr(store, "key_changes", unreadable)
    for _ in range(3):
        refused = collect(client, key)
        assert (refused.status_code, refused.json()) == (401, {"error": "Invalid API key"})
    assert reads == []

"""Security headers, the CSRF rule for cookie sessions, and the IP privacy option."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from conftest import new_project, stored, token
from tally.config import Settings
from tally.domain.privacy import IpHasher


def test_security_headers_on_every_response(client):
    for response in (
        client.get("/api/health"),
        client.get("/api/projects"),
        client.post("/api/collect", json={}),
        client.get("/api/no-such-route"),
    ):
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["referrer-policy"] == "no-referrer"
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]


def test_cookie_sessions_post_only_json(client, user):
    cookie = {"cookie": f"tally_session={token(user)}"}
    simple = client.post(
        "/api/projects",
        content=b'{"name": "Forged"}',
        headers={**cookie, "content-type": "text/plain"},
    )
    assert (simple.status_code, simple.json()) == (401, {"error": "Unauthorized"})
    json_post = client.post(
        "/api/projects",
        content=b'{"name": "Mine"}',
        headers={**cookie, "content-type": "application/json"},
    )
    assert json_post.status_code == 201
    names = [p["name"] for p in client.get("/api/projects", headers=cookie).json()["projects"]]
    assert names == ["Mine"]


def test_ip_is_stored_hashed_when_asked(make_client):
    with make_client(ip_privacy="hash", ip_hash_secret="s" * 32) as client:
        project_id, key = new_project(client)
        for _ in range(2):
            client.post(
                "/api/collect",
                json={"events": [{"name": "a"}]},
                headers={"x-api-key": key, "x-forwarded-for": "203.0.113.7"},
            )
        ips = {
            row[0]
            for row in stored(
                client, "SELECT ip FROM {db}.events WHERE project_id = {p:String}", p=project_id
            )
        }
        assert len(ips) == 1
        (ip,) = ips
        assert re.fullmatch(r"[0-9a-f]{32}", ip) and "203.0.113.7" not in ip


def test_ip_hash_salt_rotates_daily():
    hasher = IpHasher(Settings(ip_privacy="hash", ip_hash_secret="k" * 32))
    today = datetime(2026, 11, 22, 10, tzinfo=UTC)
    assert hasher("198.51.100.1", today) == hasher("198.51.100.1", today + timedelta(hours=13))
    assert hasher("198.51.100.1", today) != hasher("198.51.100.1", today + timedelta(days=1))
    assert hasher("198.51.100.1", today) != hasher("198.51.100.2", today)
    other = IpHasher(Settings(ip_privacy="hash", ip_hash_secret="x" * 32))
    assert other("198.51.100.1", today) != hasher("198.51.100.1", today)


def test_keys_and_tokens_never_reach_the_logs(make_client, caplog):
    import logging

    caplog.set_level(logging.DEBUG)
    with make_client(load_retry_min_ms=10, load_retry_max_ms=50) as client:
        project_id, key = new_project(client, user="logged")
        session = token("logged")
        headers = {"authorization": f"Bearer {session}"}
        client.post("/api/collect", json={"events": [{"name": "a"}]}, headers={"x-api-key": key})
        client.post(f"/api/collect?apiKey={key}x", json={"events": [{"name": "a"}]})
        client.post("/api/collect", json={"events": [{"name": ""}]}, headers={"x-api-key": key})
        client.get(f"/api/dashboard?projectId={project_id}", headers=headers)
        created = client.post(
            "/api/projects/keys", json={"projectId": project_id}, headers=headers
        ).json()["apiKey"]
        db = client.app.state.storage.database
        client.app.state.storage.command(f"RENAME TABLE {db}.events TO {db}.events_gone")
        try:  # a storage failure is logged (by the loader): still without the key
            client.wait_for_load = False
            failures = client.app.state.loader.failures
            accepted = client.post(
                "/api/collect", json={"events": [{"name": "a"}]}, headers={"x-api-key": created}
            )
            assert accepted.status_code == 202  # on the log; ClickHouse refuses the INSERT
            client.load_failure_seen(failures)
        finally:
            client.app.state.storage.command(f"RENAME TABLE {db}.events_gone TO {db}.events")
    # Everything the server side logged (the test's own HTTP client logs its URLs: not Tally).
    text = "\n".join(
        f"{r.name} {r.getMessage()} {r.exc_text or ''}"
        for r in caplog.records
        if not r.name.startswith(("httpx", "httpcore"))
    )
    assert "cannot load" in text  # the failure was logged...
    for secret in (key, created, session, key[3:]):
        assert secret not in text  # ...and no secret was


def test_only_key_hashes_are_stored(client, user):
    import hashlib

    project_id, key = new_project(client, user=user)
    rows = stored(client, "SELECT * FROM {db}.api_keys WHERE project_id = {p:String}", p=project_id)
    flat = " ".join(str(value) for row in rows for value in row)
    assert key not in flat and key[3:] not in flat
    assert hashlib.sha256(key.encode()).hexdigest() in flat


def _not_near_a_minute_edge(margin: float = 20.0) -> None:
    """Wait until the wall clock is more than ``margin`` seconds before the next whole minute.
    The limiter's windows are minutes of the epoch, and its sliding counter weighs the previous
    window by the time left of it and rounds down: two hits at 11:59:59.5 and a third at
    12:00:00.5 count as 1 + 1 of 2 and pass. A run that crossed a minute between its hits
    failed so (CI, 2026-11-28: [202, 202, 202, 202] for a limit of 2)."""
    import time

    left = 60.0 - time.time() % 60.0
    if left < margin:
        time.sleep(left + 0.1)


def test_rate_limits_answer_429_with_retry_after(make_client):
    with make_client(
        collect_limit_per_key="3/minute", collect_limit_per_ip="", session_limit_per_user="4/minute"
    ) as client:
        _not_near_a_minute_edge()
        _, key = new_project(client, user="limited")  # the 1st session request
        codes = [
            client.post(
                "/api/collect", json={"events": [{"name": "a"}]}, headers={"x-api-key": key}
            ).status_code
            for _ in range(4)
        ]
        assert codes == [202, 202, 202, 429]
        limited = client.post(
            "/api/collect", json={"events": [{"name": "a"}]}, headers={"x-api-key": key}
        )
        assert limited.json() == {"error": "Too many requests"}
        assert int(limited.headers["retry-after"]) >= 1
        headers = {"authorization": f"Bearer {token('limited')}"}
        sessions = [client.get("/api/projects", headers=headers).status_code for _ in range(4)]
        assert sessions == [200, 200, 200, 429]
        # Another user is not limited by this one.
        other = {"authorization": f"Bearer {token('someone-else')}"}
        assert client.get("/api/projects", headers=other).status_code == 200
    with make_client(collect_limit_per_key="", collect_limit_per_ip="2/minute") as client:
        _, key = new_project(client, user="ip")
        _not_near_a_minute_edge()
        codes = [
            client.post(
                "/api/collect",
                json={"events": [{"name": "a"}]},
                headers={"x-api-key": key, "x-forwarded-for": ip},
            ).status_code
            for ip in ("198.51.100.1",) * 3 + ("198.51.100.2",)
        ]
        assert codes == [202, 202, 429, 202]

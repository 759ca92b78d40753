"""The 2 x 2 cluster of deploy/cluster as it ships (Keeper, four ClickHouse nodes, tally-migrate,
tally serve): a tenant's events land on one shard, on both its replicas, and the dashboard
served by the stack equals the reference model. Then the contract tests in cluster mode."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import clickhouse_connect
import httpx
import pytest

from reference import dashboard
from server.helpers import DEPLOY, free_port, wait_for
from storage_modes import run_contract_tests
from tally.http.auth import issue_token
from test_dashboard import build_events, midnight, without_ids

CLUSTER = "tally_cluster"


@dataclass
class Stack:
    tally: str  # Tally's base URL
    clickhouse: str  # http://user:password@host:port of node ch-s1-r1
    jwt_secret: str


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    from testcontainers.compose import DockerCompose

    password, jwt_secret = secrets.token_hex(16), secrets.token_hex(32)
    tally_port, clickhouse_port = free_port(), free_port()
    env_file = tmp_path_factory.mktemp("cluster") / "cluster.env"
    env_file.write_text(
        f"CLICKHOUSE_USER=tally\nCLICKHOUSE_PASSWORD={password}\n"
        f"CLICKHOUSE_CLUSTER_SECRET={secrets.token_hex(16)}\nTALLY_JWT_SECRET={jwt_secret}\n"
        f"TALLY_HTTP_PORT={tally_port}\nCLICKHOUSE_HTTP_PORT={clickhouse_port}\n"
    )
    compose = DockerCompose(
        DEPLOY / "cluster",
        compose_file_name="compose.yaml",
        env_file=str(env_file),
        build=True,
        wait=False,  # tally-migrate exits by design; Tally's health says when all is up
    )
    with compose:
        base = f"http://127.0.0.1:{tally_port}"
        wait_for(f"{base}/api/health", 900)
        yield Stack(base, f"http://tally:{password}@127.0.0.1:{clickhouse_port}", jwt_secret)


def call(stack: Stack, method: str, path: str, user: str = "alice", **kwargs: Any) -> Any:
    token = issue_token(stack.jwt_secret, user)
    response = httpx.request(
        method,
        stack.tally + path,
        headers={"authorization": f"Bearer {token}", **kwargs.pop("headers", {})},
        timeout=30,
        **kwargs,
    )
    assert response.status_code < 300, response.text
    return response.json()


@pytest.fixture
def now() -> datetime:
    current = datetime.now(UTC)
    if current - midnight(current) < timedelta(minutes=30):
        pytest.skip("too close to midnight UTC for a stable day window")
    return current


def test_a_tenant_lives_on_one_shard_and_its_dashboard_matches(stack, now):
    ch = clickhouse_connect.get_client(dsn=stack.clickhouse)
    projects = []
    for n in range(20):
        created = call(stack, "POST", "/api/projects", json={"name": f"Site {n}"})
        projects.append((created["projectId"], created["apiKey"]))
    project_id, key = projects[0]
    events = build_events(now)
    for i in range(0, len(events), 100):
        batch = [e.payload() for e in events[i : i + 100]]
        sent = httpx.post(
            f"{stack.tally}/api/collect", json={"events": batch}, headers={"x-api-key": key}
        )
        assert sent.status_code == 202, sent.text
    for other_id, other_key in projects[1:]:
        sent = httpx.post(
            f"{stack.tally}/api/collect",
            json={"events": [{"name": "pageview", "path": "/", "visitorId": other_id}]},
            headers={"x-api-key": other_key},
        )
        assert sent.status_code == 202, sent.text

    # Acknowledged means stored: every event is readable at once through the Distributed table,
    # and all of a tenant's rows are on one shard.
    shards = ch.query(
        "SELECT project_id, groupUniqArray(_shard_num), count() FROM tally.events "
        "GROUP BY project_id"
    ).result_rows
    by_project = {p: (s, c) for p, s, c in shards}
    assert by_project[project_id] == ([by_project[project_id][0][0]], len(events))
    assert all(len(s) == 1 for s, _ in by_project.values())
    used = {s[0] for s, _ in by_project.values()}
    assert used == {1, 2}  # 20 tenants spread over both shards

    # Both replicas of that shard hold the tenant's rows (replication catches up by itself).
    deadline = time.monotonic() + 60
    while True:
        replicas = dict(
            ch.query(
                f"SELECT hostName(), count() FROM clusterAllReplicas('{CLUSTER}', "
                "tally.events_local) WHERE project_id = {p:String} GROUP BY hostName()",
                parameters={"p": project_id},
            ).result_rows
        )
        if sorted(replicas.values()) == [len(events)] * 2 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert sorted(replicas.values()) == [len(events)] * 2, replicas
    assert len({host.rsplit("-", 1)[0] for host in replicas}) == 1  # ch-sN-r1 and ch-sN-r2

    # Rollups were written on that shard by the views on the local tables.
    rollup_shards = ch.query(
        "SELECT groupUniqArray(_shard_num), sum(events) FROM tally.events_daily "
        "WHERE project_id = {p:String}",
        parameters={"p": project_id},
    ).result_rows[0]
    assert rollup_shards == (by_project[project_id][0], len(events))

    for days in (1, 7, 30, 90):
        answer = call(stack, "GET", f"/api/dashboard?projectId={project_id}&days={days}")
        assert without_ids(answer) == dashboard(events, now, days), f"days={days}"


@pytest.mark.timeout(3660)  # the contract tests' own subprocess timeout, and a minute
def test_contract_tests_pass_in_cluster_mode(stack, tmp_path):
    code, output = run_contract_tests(
        tmp_path,
        {"TALLY_TEST_CLICKHOUSE_URL": stack.clickhouse, "TALLY_TEST_CLICKHOUSE_CLUSTER": CLUSTER},
        3600,
    )
    assert code == 0, output[-6000:]

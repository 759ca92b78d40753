"""Tally on a ClickHouse server (the pinned image of deploy/compose), over HTTP: migrate, then
the contract tests of the default suite with their storage on the server."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator

import clickhouse_connect
import pytest

from server.helpers import CLICKHOUSE_IMAGE, wait_for
from storage_modes import run_contract_tests

USER = "tally"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """``http://user:password@host:port`` of a fresh ClickHouse server."""
    from testcontainers.core.container import DockerContainer

    password = secrets.token_hex(16)
    container = (
        DockerContainer(CLICKHOUSE_IMAGE)
        .with_env("CLICKHOUSE_USER", USER)
        .with_env("CLICKHOUSE_PASSWORD", password)
        .with_env("CLICKHOUSE_DB", "tally")
        .with_exposed_ports(8123)
    )
    with container:
        host, port = container.get_container_host_ip(), int(container.get_exposed_port(8123))
        wait_for(f"http://{host}:{port}/?query=SELECT%201", 120, auth=(USER, password))
        yield f"http://{USER}:{password}@{host}:{port}"


def tally(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_")}
    return subprocess.run(
        [sys.executable, "-m", "tally", *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_migrate_creates_the_schema_once(server, tmp_path):
    env = {"TALLY_CLICKHOUSE_URL": f"{server}/migrated", "TALLY_RETENTION_DAYS": "400"}
    first = tally("migrate", env=env)
    assert first.returncode == 0, first.stderr
    assert "applied 3 migration(s)" in first.stdout
    second = tally("migrate", env=env)
    assert second.returncode == 0 and "up to date" in second.stdout
    client = clickhouse_connect.get_client(dsn=server)
    engines = dict(
        client.query(
            "SELECT name, engine_full FROM system.tables WHERE database = 'migrated'"
        ).result_rows
    )
    assert engines["events"].startswith("MergeTree") and "toIntervalDay(400)" in engines["events"]
    assert engines["projects"].startswith("ReplacingMergeTree")


@pytest.mark.timeout(1860)  # the contract tests' own subprocess timeout, and a minute
def test_contract_tests_pass_on_the_server(server, tmp_path):
    code, output = run_contract_tests(tmp_path, {"TALLY_TEST_CLICKHOUSE_URL": server}, 1800)
    assert code == 0, output[-6000:]

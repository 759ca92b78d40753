"""Shared fixtures. Every test runs against the real ClickHouse engine (chDB, in process).

chDB hosts one engine per process, so the whole session shares one data folder and each test
gets a database of its own with a random name: tests are independent of one another and of order.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from tally.app import create_app
from tally.config import Settings
from tally.http.auth import issue_token

JWT_SECRET = "test-secret-0123456789abcdef0123456789"


@pytest.fixture(scope="session")
def chdb_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("chdb")


def make_settings(chdb_path: Path, tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "clickhouse_url": f"chdb://{chdb_path}?database=t_{uuid.uuid4().hex[:12]}",
        "data_dir": str(tmp_path),
        "jwt_secret": JWT_SECRET,
        "clickhouse_pool_size": 4,
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def settings(chdb_path: Path, tmp_path: Path) -> Settings:
    return make_settings(chdb_path, tmp_path)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient[Any]]:
    with TestClient(create_app(settings, migrate=True)) as test_client:
        yield test_client


def token(sub: str, secret: str = JWT_SECRET, **claims: Any) -> str:
    return issue_token(secret, sub, **claims)


def auth(sub: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token(sub)}"}


def new_project(client: TestClient[Any], user: str = "alice", name: str = "Site") -> tuple[str, str]:
    """Create a project as ``user``; return (project id, API key)."""
    response = client.post("/api/projects", json={"name": name}, headers=auth(user))
    assert response.status_code == 201, response.text
    body = response.json()
    return body["projectId"], body["apiKey"]

"""Shared fixtures. Every test runs against the real ClickHouse engine (chDB, in process; or a
ClickHouse server or cluster when tests/storage_modes.py says so).

chDB hosts one engine per process, so the whole session shares one data folder. The ``client``
fixture is one app on one database for the session: tests stay independent because each works in
projects it creates itself (random ids) under users of its own. Tests that change settings or
break storage build a private app on a fresh database with ``make_client``.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from storage_modes import (
    CLUSTER_SHAPE,
    apply_cluster_shape,
    run_cluster_commands_on_one_node,
    storage_overrides,
)
from tally.app import create_app
from tally.config import Settings
from tally.http.auth import issue_token
from tally.storage.client import Storage, parse_url

JWT_SECRET = "test-secret-0123456789abcdef0123456789"

if CLUSTER_SHAPE:
    run_cluster_commands_on_one_node()


# The columns of ``events`` that Tally wrote before schema 005: old segments and rows in the
# upgrade tests.
COLUMNS_BEFORE_005 = (
    "project_id",
    "name",
    "occurred_at",
    "received_at",
    "path",
    "url",
    "referrer",
    "session_id",
    "visitor_id",
    "browser",
    "os",
    "device_type",
    "duration_ms",
    "metadata",
    "ip",
    "user_agent",
    "key_id",
)

# Known at import, so that modules can build apps at collection time (test_openapi's document).
CHDB_PATH = Path(tempfile.mkdtemp(prefix="tally-test-chdb-"))


@pytest.fixture(scope="session")
def chdb_path() -> Path:
    return CHDB_PATH


def pytest_unconfigure(config: pytest.Config) -> None:
    """The shared engine's folder goes with the run (every test's data is in it)."""
    shutil.rmtree(CHDB_PATH, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed test that started `tally serve` (tests/served.py), or ran while one was running,
    shows the end of each such server's log: a crash, a respawned worker or a warning there says
    what the client could not."""
    outcome = yield
    report = outcome.get_result()
    served = sys.modules.get("served")
    logs = getattr(served, "STARTED_LOGS", None)
    if logs is None:
        return
    if report.failed:
        # This test's servers, and those still running from before it (a module's server).
        for path in dict.fromkeys([*logs, *served.RUNNING_LOGS]):
            try:
                tail = path.read_text(errors="replace")[-3000:]
            except OSError as exc:
                tail = f"(not readable: {exc})"
            report.sections.append((f"tally serve log {path.name}", tail))
    if report.when == "teardown" or report.failed:
        logs.clear()


def make_settings(chdb_path: Path, tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        **storage_overrides(chdb_path, f"t_{uuid.uuid4().hex[:12]}"),
        "data_dir": str(tmp_path),
        "jwt_secret": JWT_SECRET,
        "clickhouse_pool_size": 4,
    }
    values.update(overrides)
    return Settings(**values)


class IngestingClient(TestClient[Any]):
    """A test client whose acknowledged collects are loaded before ``post`` returns.

    A 202 means "fsynced to the ingest log"; ClickHouse has the events about a second later
    (README, "How it is built"). The contract tests read what they just posted, so this client
    seals and loads the log after each 202 from ``/api/collect`` instead of waiting for the seal
    age; tests of the log itself set ``wait_for_load = False`` (tests/test_loader.py)."""

    wait_for_load = True

    def post(self, url: Any, *args: Any, **kwargs: Any) -> Any:
        response = super().post(url, *args, **kwargs)
        if (
            self.wait_for_load
            and response.status_code == 202
            and str(url).startswith("/api/collect")
        ):
            self.load()
        return response

    def load(self, timeout: float = 120) -> None:
        """Seal the log and return once every segment is in ClickHouse."""

        async def flush() -> None:
            await asyncio.wait_for(self.app.state.loader.flush(), timeout)

        self.blocking_portal.call(flush)

    def load_failure_seen(self, failures: int, timeout: float = 120) -> None:
        """Return once the loader has failed more than ``failures`` times in all."""
        import time

        deadline = time.monotonic() + timeout
        while self.app.state.loader.failures <= failures:
            assert time.monotonic() < deadline, "the loader never failed"
            time.sleep(0.02)


@contextmanager
def running(settings: Settings) -> Iterator[TestClient[Any]]:
    """A started app (schema applied) on ``settings``."""
    if CLUSTER_SHAPE:
        target = parse_url(settings.storage_url, settings.clickhouse_database)
        storage = Storage(target, pool_size=1, cluster=settings.clickhouse_cluster)
        try:
            apply_cluster_shape(storage, settings.retention_days)
        finally:
            storage.close()
    with IngestingClient(create_app(settings, migrate=not CLUSTER_SHAPE)) as test_client:
        yield test_client


@pytest.fixture
def make_client(chdb_path: Path, tmp_path: Path):
    """``make_client(**settings)``: a private app on a fresh database."""

    @contextmanager
    def factory(**overrides: Any) -> Iterator[TestClient[Any]]:
        with running(make_settings(chdb_path, tmp_path, **overrides)) as test_client:
            yield test_client

    return factory


@pytest.fixture(scope="session")
def client(chdb_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient[Any]]:
    # Per-user limits would otherwise count every test's requests against the same few users.
    settings = make_settings(
        chdb_path, tmp_path_factory.mktemp("shared"), session_limit_per_user="1000000/second"
    )
    with running(settings) as test_client:
        yield test_client


@pytest.fixture
def user() -> str:
    """A user id of this test's own."""
    return f"user-{uuid.uuid4().hex[:10]}"


def token(sub: str, secret: str = JWT_SECRET, **claims: Any) -> str:
    return issue_token(secret, sub, **claims)


def auth(sub: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token(sub)}"}


def new_project(
    client: TestClient[Any], user: str = "alice", name: str = "Site"
) -> tuple[str, str]:
    """Create a project as ``user``; return (project id, API key)."""
    response = client.post("/api/projects", json={"name": name}, headers=auth(user))
    assert response.status_code == 201, response.text
    body = response.json()
    return body["projectId"], body["apiKey"]


def stored(client: TestClient[Any], sql: str, **params: Any) -> list[tuple[Any, ...]]:
    """Rows from the test's own database; ``{db}`` in ``sql`` names it."""
    storage = client.app.state.storage
    return storage.query(sql.replace("{db}", storage.database), params)


def within_one_month(span: timedelta, now: datetime | None = None) -> datetime:
    """``now`` (default: the clock's), or noon of the last day of the month before when the
    ``span`` before ``now`` reaches into that month: an instant such that events placed in the
    ``span`` before it lie in one UTC calendar month, so in one monthly partition of every table.
    For tests whose verdict rests on the parts a read meets (a projection chosen over the table,
    a query's memory): in the first days of a month their events fell in two partitions, and
    they failed (2026-12-02) where mid-month they pass. At most ``span`` plus a month's first
    days before ``now``."""
    now = now or datetime.now(UTC)
    month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return now if now - span >= month else month - timedelta(hours=12)


def migrate_before(storage: Storage, version: int) -> None:
    """Apply the schema files numbered below ``version`` and record them as ``migrate`` does:
    a database as the Tally of that time left it, for upgrade tests."""
    from tally.storage.migrate import load_migrations, migrations_table

    storage.command(migrations_table(storage.database))
    for migration in load_migrations():
        if migration.version >= version:
            break
        apply_recorded(storage, migration)


def apply_recorded(storage: Storage, migration: Any) -> None:
    """Apply ``migration`` (a storage.migrate.Migration) and record it, as the migrate of its
    release did."""
    for statement in migration.statements(storage.database):
        storage.command(statement)
    storage.insert(
        f"{storage.database}.schema_migrations",
        [[migration.version], [migration.name], [migration.checksum]],
        ["version", "name", "checksum"],
    )

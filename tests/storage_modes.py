"""Where the suite's storage lives. By default: the embedded engine. Two variables point the
contract tests elsewhere; tests/test_cluster_shape.py and tests/server set them for runs of the
suite in processes of their own.

- ``TALLY_TEST_CLICKHOUSE_URL``: a ClickHouse server, ``http://user:password@host:port``. Each
  app gets a fresh database on it.
- ``TALLY_TEST_CLICKHOUSE_CLUSTER``: cluster mode, the schema rendered for this cluster. With a
  server URL it is the real thing (``ON CLUSTER``, replication, Distributed tables). On the
  embedded engine it is the *cluster shape*: see :func:`apply_cluster_shape`.

The cluster shape. chDB runs neither Keeper nor distributed DDL, but it does have clusters and
Distributed tables: with :data:`CLUSTER_SHAPE_CONFIG` (read from ``config.xml`` in the working
directory; one shard whose one replica is this node) a Distributed table reads and writes its
local table in process, through the same code a server runs for its local shard. So every
statement of cluster mode runs here as rendered, less the two things chDB cannot do: ``ON
CLUSTER`` is dropped and each ``Replicated*MergeTree`` becomes its plain twin (same columns,
keys and deduplication window). Those two are tested against real servers in tests/server.
"""

from __future__ import annotations

import os
import re
from typing import Any

from tally.storage.client import Storage
from tally.storage.migrate import load_migrations, migrations_table, retention_statements

SERVER_URL = os.environ.get("TALLY_TEST_CLICKHOUSE_URL", "").rstrip("/")
CLUSTER = os.environ.get("TALLY_TEST_CLICKHOUSE_CLUSTER", "")
CLUSTER_SHAPE = bool(CLUSTER) and not SERVER_URL

# tcp_port only lets the engine recognise "localhost:9000" as itself (system.clusters.is_local),
# so that the Distributed tables never open a connection: nothing listens there.
CLUSTER_SHAPE_CONFIG = """<clickhouse>
    <tcp_port>9000</tcp_port>
    <macros><shard>01</shard><replica>embedded</replica></macros>
    <remote_servers>
        <{cluster}>
            <shard>
                <internal_replication>true</internal_replication>
                <replica><host>localhost</host><port>9000</port></replica>
            </shard>
        </{cluster}>
    </remote_servers>
</clickhouse>
"""

_REPLICATED = re.compile(r"\bReplicated(\w*MergeTree)\('[^']*', '[^']*'(?:, )?")


def for_one_embedded_node(statement: str, cluster: str) -> str:
    """A cluster-mode statement as chDB can run it: no ON CLUSTER, no replication."""
    statement = statement.replace(f" ON CLUSTER {cluster}", "")
    statement = _REPLICATED.sub(r"\1(", statement)
    return statement.replace(
        "replicated_deduplication_window", "non_replicated_deduplication_window"
    )


def apply_cluster_shape(storage: Storage, retention_days: int = 0) -> None:
    """What ``migrate`` does in cluster mode, as one embedded node can do it."""
    cluster = storage.cluster
    is_local = storage.query(
        "SELECT groupArray(is_local) FROM system.clusters WHERE cluster = {c:String}",
        {"c": cluster},
    )[0][0]
    assert is_local == [1], f"config.xml must define cluster {cluster} as this node: {is_local}"
    statements = [migrations_table(storage.database, cluster)]
    for migration in load_migrations():
        statements += migration.statements(storage.database, cluster)
    for statement in statements:
        storage.command(for_one_embedded_node(statement, cluster))
    engines = dict(
        storage.query(
            "SELECT name, engine_full FROM system.tables WHERE database = {db:String}",
            {"db": storage.database},
        )
    )
    for statement in retention_statements(engines, retention_days, storage.database, cluster):
        storage.command(for_one_embedded_node(statement, cluster))


def run_cluster_commands_on_one_node() -> None:
    """Statements the service itself sends ``ON CLUSTER`` at run time (a project's deletion,
    storage/purge.py) run in the cluster shape as :func:`for_one_embedded_node` renders them."""
    original = Storage.command
    if getattr(original, "one_node", False):
        return

    def command(self: Storage, sql: str, parameters: dict[str, Any] | None = None) -> Any:
        if self.cluster and f" ON CLUSTER {self.cluster}" in sql:
            sql = for_one_embedded_node(sql, self.cluster)
        return original(self, sql, parameters)

    command.one_node = True  # type: ignore[attr-defined]
    Storage.command = command  # type: ignore[method-assign]


def storage_overrides(chdb_path: Any, database: str) -> dict[str, Any]:
    """The settings that put one app's database where this run's storage is."""
    url = f"{SERVER_URL}/{database}" if SERVER_URL else f"chdb://{chdb_path}?database={database}"
    return {"clickhouse_url": url, "clickhouse_cluster": CLUSTER}


# The contract tests: what the service answers and stores, through every statement it runs.
# Runs of the suite against other storage (cluster shape, server, cluster) run these files.
CONTRACT_TESTS = (
    "test_projects.py",
    "test_keys.py",
    "test_collect.py",
    "test_dashboard.py",
    "test_writer.py",
    "test_loader.py",
    "test_docs.py",
)


def run_contract_tests(cwd: Any, env: dict[str, str], timeout: float) -> tuple[int, str]:
    """Run the contract tests in a process of their own; return its exit code and output."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-x",
            "-n",
            "0",  # one process: the suite around it already runs one per core
            "-p",
            "no:cacheprovider",
            "-c",
            str(root / "pyproject.toml"),
            "--rootdir",
            str(root),
            *(str(root / "tests" / name) for name in CONTRACT_TESTS),
        ],
        cwd=cwd,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done.returncode, done.stdout + done.stderr

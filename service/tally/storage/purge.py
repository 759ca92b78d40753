"""Deleting a project's rows from every table that holds them.

The tables are found, not listed: every MergeTree table of the database with a ``project_id``
column, so a rollup added later is covered without a change here. ``api_keys`` is the one
exception: its rows stay, revoked, because other processes learn of a revocation by reading them
(storage/keys.py); they hold a hash of a key that no longer works and the project's id, nothing
of its visitors. ``projects`` (keyed by ``id``) keeps the project's row with ``deleted_at`` set.

Each table gets ``ALTER TABLE ... DELETE WHERE project_id = ...``, a mutation, rather than a
lightweight ``DELETE FROM``:

- ClickHouse refuses a lightweight DELETE on a table with a projection (``sessions_daily`` has
  one, schema 004), and one mechanism for every table is simpler to reason about;
- a mutation rewrites the parts, so the rows are gone from disk when it completes, while a
  lightweight DELETE only masks them until the next merge: a deleted tenant's data should go.

``mutations_sync = 2`` makes each statement return once every replica has applied it, so the
204 of ``DELETE /api/projects`` means the rows are gone. A mutation is stored by ClickHouse as soon
as it is accepted, so one interrupted (a lost connection, a restart) still completes there.

On a cluster the rows live in the ``_local`` tables (storage/migrate.py), so those are what is
found and mutated, ``ON CLUSTER`` so that the shard holding the project applies it.
"""

from __future__ import annotations

import re

from .client import Storage
from .migrate import LOCAL_SUFFIX

KEPT_TABLES = frozenset({"api_keys"})
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def project_tables(storage: Storage) -> list[str]:
    """The tables whose rows a project's deletion removes, in name order."""
    rows = storage.query(
        """
        SELECT c.table
        FROM system.columns AS c
        INNER JOIN system.tables AS t ON t.database = c.database AND t.name = c.table
        WHERE c.database = {db:String} AND c.name = 'project_id'
          AND t.engine LIKE '%MergeTree'
        ORDER BY c.table
        """,
        {"db": storage.database},
    )
    tables = []
    for (name,) in rows:
        base = name.removesuffix(LOCAL_SUFFIX) if storage.cluster else name
        if storage.cluster and not name.endswith(LOCAL_SUFFIX):
            continue  # not a table of cluster mode's own
        if base in KEPT_TABLES or not _IDENTIFIER.match(name):
            continue
        tables.append(name)
    return tables


def delete_statements(database: str, tables: list[str], cluster: str = "") -> list[str]:
    """One mutation per table; ``{project:String}`` is bound by the caller."""
    on_cluster = f" ON CLUSTER {cluster}" if cluster else ""
    return [
        f"ALTER TABLE {database}.{table}{on_cluster} DELETE WHERE project_id = {{project:String}} "
        "SETTINGS mutations_sync = 2"
        for table in tables
    ]


def purge_project(storage: Storage, project_id: str) -> list[str]:
    """Delete ``project_id``'s rows from every table found; return the tables."""
    tables = project_tables(storage)
    for statement in delete_statements(storage.database, tables, storage.cluster):
        storage.command(statement, {"project": project_id})
    return tables

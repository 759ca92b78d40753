"""Apply ``schema/`` in order and record what was applied.

Each file is idempotent on its own (``IF NOT EXISTS``), and the record lets ``tally migrate``
report what is new. Applying everything twice changes nothing.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from string import Template

from .client import Storage

log = logging.getLogger("tally.migrate")

MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS ${db}.schema_migrations
(
    version    UInt32,
    name       String,
    checksum   String,
    applied_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(applied_at)
ORDER BY version
"""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()[:16]

    def statements(self, database: str) -> list[str]:
        """The file's statements, with ``${db}`` replaced by the database name."""
        rendered = Template(self.sql).substitute(db=database)
        out: list[str] = []
        current: list[str] = []
        for line in rendered.splitlines():
            stripped = line.strip()
            if stripped.startswith("--") and not current:
                continue
            current.append(line)
            if stripped.endswith(";"):
                out.append("\n".join(current).rstrip().rstrip(";"))
                current = []
        if "".join(current).strip():
            out.append("\n".join(current))
        return out


def schema_dir() -> Path:
    """The schema folder: shipped inside the package, or ``schema/`` of a source checkout."""
    packaged = resources.files("tally") / "schema"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[3] / "schema"


def load_migrations(folder: Path | None = None) -> list[Migration]:
    folder = folder or schema_dir()
    migrations = []
    for path in sorted(folder.glob("[0-9][0-9][0-9]_*.sql")):
        version = int(path.name[:3])
        migrations.append(Migration(version, path.stem, path.read_text()))
    if not migrations:
        raise FileNotFoundError(f"no schema files found in {folder}")
    return migrations


def applied_versions(storage: Storage) -> dict[int, str]:
    rows = storage.query(
        f"SELECT version, argMax(checksum, applied_at) FROM {storage.database}.schema_migrations "
        "GROUP BY version"
    )
    return {int(v): c for v, c in rows}


# The time column each table expires by, for the retention TTL.
RETENTION_COLUMNS: dict[str, str] = {
    "events": "toDateTime(occurred_at)",
    "events_daily": "day",
    "events_hourly": "hour",
    "paths_daily": "day",
    "referrers_daily": "day",
    "clients_daily": "day",
    "visitors_daily": "day",
    "sessions_daily": "day",
}


def apply_retention(storage: Storage, days: int) -> None:
    """Keep ``days`` days of events and rollups (0: keep everything). Safe to repeat or change."""
    rows = storage.query(
        "SELECT name, engine_full FROM system.tables WHERE database = {db:String}",
        {"db": storage.database},
    )
    engines = dict(rows)
    for table, column in RETENTION_COLUMNS.items():
        engine = engines.get(table, "")
        wanted = f"{column} + toIntervalDay({days})"
        if days > 0 and f"TTL {wanted}" not in engine:
            storage.command(f"ALTER TABLE {storage.database}.{table} MODIFY TTL {wanted}")
        elif days <= 0 and " TTL " in engine:
            storage.command(f"ALTER TABLE {storage.database}.{table} REMOVE TTL")


def migrate(storage: Storage, retention_days: int = 0) -> list[str]:
    """Apply every migration and the retention TTL; return the migrations new to this database."""
    storage.command(Template(MIGRATIONS_TABLE).substitute(db=storage.database))
    before = applied_versions(storage)
    new: list[str] = []
    for migration in load_migrations():
        for statement in migration.statements(storage.database):
            storage.command(statement)
        if before.get(migration.version) != migration.checksum:
            storage.insert(
                f"{storage.database}.schema_migrations",
                [[migration.version], [migration.name], [migration.checksum]],
                ["version", "name", "checksum"],
            )
            new.append(migration.name)
            log.info("applied %s", migration.name)
    apply_retention(storage, retention_days)
    return new

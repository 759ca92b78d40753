"""Apply ``schema/`` in order and record what was applied.

Each file is idempotent on its own (``IF NOT EXISTS``), and the record lets ``tally migrate``
report what is new. Applying everything twice changes nothing. A migration already recorded has
its DDL applied again, which is cheap and idempotent, but not its one-time backfills (``INSERT
... SELECT`` over what is stored, ``MATERIALIZE PROJECTION`` for the parts stored before): those
ran when it was applied and its views and projections keep up since. Run at every ``tally
serve`` start, schema 012's read every stored event again (about 20 s at 11M events) and added a
second copy of its rows to ``sessions_quarter`` until merges combined them (session-dimension
breakdowns about half as fast meanwhile).

"Already recorded" means: recorded with the text it has now, or with an earlier text that differs
from it only in SQL comments and whitespace. The record holds the checksum of the whole file (what
every release has recorded, so a release rolled back to still recognises it); what it is compared
by is :attr:`Migration.sql_checksum`, over the SQL alone (:func:`sql_text`). Earlier texts are
known by :data:`RECORDED_TEXTS`: every whole-file checksum a released file has had, with the SQL
checksum of that text. A record of a text whose SQL differs (schema 012 as first released, before
its ``ends_*`` columns) is applied again, backfills included: the later text is what the database
needs. A checksum not known at all (a file edited by hand) is applied again too, with a warning.

The same files serve one node (embedded engine or a ClickHouse server) and a cluster. On one
node they run as written, ``${db}`` replaced by the database. On a cluster (``cluster`` names a
``remote_servers`` entry) each statement is rendered for it, ``ON CLUSTER``:

- a table ``T`` becomes ``T_local``, a ``Replicated*MergeTree`` on every node (one replica set
  per shard, path ``/clickhouse/tables/{shard}/{database}/T_local``), plus ``T`` itself, a
  ``Distributed`` table over ``T_local`` sharded by :data:`SHARDING_KEYS`. The service and
  analysts keep using the names they know; no query changes.
- a materialized view reads ``events_local`` and writes ``<rollup>_local`` on the node that
  stored the events, so rollups live on the shard of their events.
- an ``ALTER`` that adds a projection or changes a MergeTree setting alters ``T_local``: that is
  where the rows (and their projections) are stored.
- an ``ALTER`` that adds a column alters ``T_local`` and then ``T``: the Distributed table must
  know the column to pass it on.
- ``schema_migrations`` is one replicated table with a replica on every node (no ``{shard}`` in
  its path), so the record is the same whichever node ``tally migrate`` talks to.
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from string import Template

from ..config import CLUSTER_NAME, MAX_RETENTION_DAYS
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


# Cluster mode: the Distributed table of each storage table sends a row to the shard this picks.
# All rows of a project land on one shard (its dashboard is that shard's work alone, and
# ``optimize_skip_unused_shards`` asks only that shard), and all versions of a project or a key
# land together, so ``FINAL`` and ``argMax`` see every version. Rollups are written by views on
# the shard of their events, so their key must equal that of ``events``: reads use it to find
# the shard. ``projects`` is keyed by its id, which is the ``project_id`` of everything else.
PROJECT_SHARD = "cityHash64(project_id)"
SHARDING_KEYS: dict[str, str] = {
    "events": PROJECT_SHARD,
    "events_daily": PROJECT_SHARD,
    "events_hourly": PROJECT_SHARD,
    "paths_daily": PROJECT_SHARD,
    "referrers_daily": PROJECT_SHARD,
    "clients_daily": PROJECT_SHARD,
    "visitors_daily": PROJECT_SHARD,
    "sessions_daily": PROJECT_SHARD,
    "events_quarter": PROJECT_SHARD,
    "visitors_quarter": PROJECT_SHARD,
    "sessions_quarter": PROJECT_SHARD,
    "audience_quarter": PROJECT_SHARD,
    "session_values": PROJECT_SHARD,
    "session_days": PROJECT_SHARD,
    "event_visitors": PROJECT_SHARD,
    "projects": "cityHash64(id)",
    "api_keys": PROJECT_SHARD,
    "api_key_usage": PROJECT_SHARD,
}
LOCAL_SUFFIX = "_local"

_CREATE_TABLE = re.compile(r"\ACREATE TABLE IF NOT EXISTS \$\{db\}\.(\w+)\n")
_CREATE_VIEW = re.compile(r"\ACREATE MATERIALIZED VIEW IF NOT EXISTS \$\{db\}\.(\w+) TO ")
_ENGINE = re.compile(r"^ENGINE = (\w*)MergeTree(?:\((.*)\))?$", re.MULTILINE)
_TABLE_REF = re.compile(r"\$\{db\}\.(\w+)")
# ALTERs that change only how a table stores its rows (a projection, a MergeTree setting, a
# MATERIALIZED column written for the parts stored before): on a cluster they belong to the
# local tables, not to the Distributed table in front of them.
_ALTER_STORAGE = re.compile(
    r"\AALTER TABLE \$\{db\}\.(\w+) "
    r"(?=(?:ADD|MATERIALIZE|DROP) PROJECTION |MATERIALIZE COLUMN |MODIFY SETTING )"
)
# ALTERs that change the columns: the local tables first, then the Distributed table in front.
_ALTER_COLUMNS = re.compile(r"\AALTER TABLE \$\{db\}\.(\w+) (?=(?:ADD|COMMENT) COLUMN )")
# A column added to the sorting key in the same ALTER: the sorting key is the local tables' own.
_ORDER_BY_CHANGE = re.compile(r", MODIFY ORDER BY \(.*\)\Z", re.DOTALL)
# A materialized view's query changed in place (atomically): on a cluster, every node's view.
_ALTER_VIEW_QUERY = re.compile(r"\AALTER TABLE \$\{db\}\.(\w+_mv) MODIFY QUERY\n")
# A one-time backfill (INSERT ... SELECT): through the Distributed tables, from one node.
_INSERT = re.compile(r"\AINSERT INTO \$\{db\}\.(\w+) ")
# The same, rendered (the database named), and a projection built for the parts stored before
# (a background mutation over every part): what :func:`migrate` runs only for a new migration.
_BACKFILL = re.compile(r"\A\s*(?:INSERT INTO |ALTER TABLE \S+ (?:ON CLUSTER \S+ )?MATERIALIZE )")
# A backfill that fills a table only while it is empty (schemas 007, 008, 010), rendered.
_GUARDED = re.compile(
    r"\AINSERT INTO (\w+)\.(\w+) .*\(SELECT count\(\) FROM \1\.\2\) = 0\b", re.DOTALL
)


def _check_cluster(cluster: str) -> None:
    if not CLUSTER_NAME.match(cluster):
        raise ValueError(f"invalid cluster name {cluster!r}: letters, digits and underscore only")


def _replicated(statement: str, path: str, replica: str) -> str:
    """``ENGINE = XMergeTree(args)`` as ``ENGINE = ReplicatedXMergeTree(path, replica, args)``."""

    def engine(match: re.Match[str]) -> str:
        args = [f"'{path}'", f"'{replica}'", *([match[2]] if match[2] else [])]
        return f"ENGINE = Replicated{match[1]}MergeTree({', '.join(args)})"

    rendered, count = _ENGINE.subn(engine, statement)
    if count != 1:
        raise ValueError(f"expected one MergeTree engine in: {statement.splitlines()[0]}")
    # Replicated tables deduplicate retried inserts through Keeper, by this window.
    return rendered.replace(
        "non_replicated_deduplication_window", "replicated_deduplication_window"
    )


def render_for_cluster(statement: str, cluster: str) -> list[str]:
    """One statement of ``schema/`` (``${db}`` still in it) as the statements of cluster mode."""
    _check_cluster(cluster)
    lines = statement.strip().splitlines()
    while lines and lines[0].lstrip().startswith("--"):  # its heading comment
        lines.pop(0)
    statement = "\n".join(lines).strip()
    if table := _CREATE_TABLE.match(statement):
        name = table[1]
        if name not in SHARDING_KEYS:
            raise ValueError(f"table {name} has no sharding key: add it to SHARDING_KEYS")
        local = name + LOCAL_SUFFIX
        head = f"CREATE TABLE IF NOT EXISTS ${{db}}.{local} ON CLUSTER {cluster}\n"
        local_table = _replicated(
            head + statement[table.end() :],
            path=f"/clickhouse/tables/{{shard}}/{{database}}/{local}",
            replica="{replica}",
        )
        distributed = (
            f"CREATE TABLE IF NOT EXISTS ${{db}}.{name} ON CLUSTER {cluster} AS ${{db}}.{local}\n"
            f"ENGINE = Distributed({cluster}, ${{db}}, {local}, {SHARDING_KEYS[name]})"
        )
        return [local_table, distributed]
    if view := _CREATE_VIEW.match(statement):

        def local_ref(ref: re.Match[str]) -> str:
            if ref[1] not in SHARDING_KEYS:
                raise ValueError(f"view {view[1]} uses {ref[1]}, which is not a storage table")
            return f"${{db}}.{ref[1]}{LOCAL_SUFFIX}"

        head = f"CREATE MATERIALIZED VIEW IF NOT EXISTS ${{db}}.{view[1]} ON CLUSTER {cluster} TO "
        return [head + _TABLE_REF.sub(local_ref, statement[view.end() :])]
    if alter := _ALTER_STORAGE.match(statement):
        if alter[1] not in SHARDING_KEYS:
            raise ValueError(f"table {alter[1]} is not a storage table")
        local = alter[1] + LOCAL_SUFFIX
        return [f"ALTER TABLE ${{db}}.{local} ON CLUSTER {cluster} " + statement[alter.end() :]]
    if alter := _ALTER_COLUMNS.match(statement):
        if alter[1] not in SHARDING_KEYS:
            raise ValueError(f"table {alter[1]} is not a storage table")
        change = statement[alter.end() :]
        return [
            f"ALTER TABLE ${{db}}.{alter[1]}{LOCAL_SUFFIX} ON CLUSTER {cluster} {change}",
            f"ALTER TABLE ${{db}}.{alter[1]} ON CLUSTER {cluster} "
            + _ORDER_BY_CHANGE.sub("", change),
        ]
    if alter := _ALTER_VIEW_QUERY.match(statement):
        view_name = alter[1]

        def to_local(ref: re.Match[str]) -> str:
            if ref[1] not in SHARDING_KEYS:
                raise ValueError(f"view {view_name} uses {ref[1]}, which is not a storage table")
            return f"${{db}}.{ref[1]}{LOCAL_SUFFIX}"

        query = _TABLE_REF.sub(to_local, statement[alter.end() :])
        return [f"ALTER TABLE ${{db}}.{alter[1]} ON CLUSTER {cluster} MODIFY QUERY\n{query}"]
    if (insert := _INSERT.match(statement)) and insert[1] in SHARDING_KEYS:
        return [statement]
    raise ValueError(
        "cluster mode does not know how to render this statement; teach "
        f"tally/storage/migrate.py: {statement.splitlines()[0]}"
    )


def split_statements(sql: str) -> list[str]:
    """The statements of a schema file: separated by lines ending in ``;``, leading comments
    dropped."""
    out: list[str] = []
    current: list[str] = []
    for line in sql.splitlines():
        stripped = line.strip()
        if stripped.startswith("--") and not any(part.strip() for part in current):
            continue  # a comment before a statement (after the blank line that ends the last)
        current.append(line)
        if stripped.endswith(";"):
            out.append("\n".join(current).rstrip().rstrip(";"))
            current = []
    if "".join(current).strip():
        out.append("\n".join(current))
    return out


# A schema file's text in pieces: a quoted string or identifier (kept as it is: a column comment
# or a literal is SQL), a run of whitespace and comments (one space), anything else (kept, a
# quote left open included).
_SQL_PIECE = re.compile(
    r"""(?P<quoted>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*"|`(?:[^`\\]|\\.|``)*`)"""
    r"""|(?P<gap>(?:\s|--[^\n]*|/\*.*?\*/)+)"""
    r"""|[^'"`\s/-]+|.""",
    re.DOTALL,
)


def sql_text(sql: str) -> str:
    """``sql`` without its comments (``--`` and ``/* */`` outside quotes), every run of whitespace
    and comments one space: two texts with the same SQL give the same string. Its checksum is
    :attr:`Migration.sql_checksum`, compared with :data:`RECORDED_TEXTS`: change this and every
    recorded migration counts as changed (tests/test_migrate.py pins it)."""
    return "".join(" " if m["gap"] else m[0] for m in _SQL_PIECE.finditer(sql)).strip()


def _checksum(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# Every text each released schema file has had: the checksum of the whole file (what `tally
# migrate` recorded in schema_migrations) -> the checksum of its SQL (:func:`sql_text`). Derived
# from `git log -p -- schema/` (tests/test_upgrade_recorded.py checks every entry against the
# history, and that the current files are listed). Entries are never removed: databases keep the
# records. Earlier texts:
# - 002 at 1ab52be (before ca46513 replaced session_ends by the ends of sessions_daily): other SQL.
# - 012 at 3746593 (before e24fd2d added ends_unstated/ends_stated, their view and backfill): other
#   SQL, so it is applied again, the backfill included (idempotent: mins, maxes and ends read once).
# - 014 at 7ed35d5 and 015 at 120a0c0: their header comments only (cost figures); the same SQL.
RECORDED_TEXTS: dict[int, dict[str, str]] = {
    1: {"d6f325b724c4b5d6": "e6da72ba72f26070"},
    2: {"ca734156e575f5ea": "01664b372fec6e1f", "39bc2010c2974eff": "7f1e5ee56a194259"},
    3: {"050cedbc3baf551b": "ac2ab26c4d7c3856"},
    4: {"9f4774daa1140b45": "a7e5806fcc683691"},
    5: {"f1084c81e68f8873": "df12af427fffd96a"},
    6: {"41e85bcfa3fb4db6": "0d1b42c20f9b9d0a"},
    7: {"768d0436ec9a05b2": "ec3ce422d2e922da"},
    8: {"4ae5099de9f01868": "08499a52198527de"},
    9: {"9d82b552e60e1f15": "a31fe899e3f5eb01"},
    10: {"3c6bec39e67d6994": "eddd57abf4bacc5a"},
    11: {"e269f0658146a13a": "2617de4d37de4379"},
    12: {"6f9da9523ec4591f": "25146dbcd1f48391", "59002a9393b45a63": "c3ab8b28988ba14f"},
    13: {"c8623bc369b58a72": "3e74355c2ee8039d"},
    14: {"f59afedadcd103d8": "77ced5744c4b7046", "b96c90d9e4fc2fec": "77ced5744c4b7046"},
    15: {"12c07a90ca528235": "3a67131ef1a9c689", "472846f45021a40b": "3a67131ef1a9c689"},
    16: {"b602f04aa0e90db6": "c3691f959f01c40b"},
    17: {"ecd577de1779e0fc": "67c11536d55324e8"},
    18: {"ee549c2196359119": "113d7d4ddb2302cb"},
    19: {"a99c507463cd7e33": "20cd6e0c92a730a3"},
    20: {"4e4bc06fd34fd77a": "2acece918ef20c79"},
}


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        """Of the whole file: what is recorded in ``schema_migrations``."""
        return _checksum(self.sql)

    @property
    def sql_checksum(self) -> str:
        """Of its SQL alone (:func:`sql_text`): what a record is compared by."""
        return _checksum(sql_text(self.sql))

    def recorded_as(self, recorded: str | None) -> str:
        """What a record of ``recorded`` (a whole-file checksum; None: no record) says of this
        migration: ``"applied"`` (this text, or one with the same SQL), ``"new"`` (no record),
        ``"changed"`` (an earlier text with other SQL) or ``"unknown"`` (a text no release had)."""
        if recorded is None:
            return "new"
        if recorded == self.checksum:
            return "applied"
        earlier = RECORDED_TEXTS.get(self.version, {}).get(recorded)
        if earlier is None:
            return "unknown"
        return "applied" if earlier == self.sql_checksum else "changed"

    def statements(self, database: str, cluster: str = "") -> list[str]:
        """The file's statements for ``database``, rendered for ``cluster`` when one is named."""
        statements = split_statements(self.sql)
        if cluster:
            statements = [out for s in statements for out in render_for_cluster(s, cluster)]
        return [Template(s).substitute(db=database) for s in statements]


def database_statement(database: str, cluster: str = "") -> str:
    if cluster:
        _check_cluster(cluster)
        return f"CREATE DATABASE IF NOT EXISTS {database} ON CLUSTER {cluster}"
    return f"CREATE DATABASE IF NOT EXISTS {database}"


def migrations_table(database: str, cluster: str = "") -> str:
    """The ``schema_migrations`` DDL; on a cluster one replicated table with a replica per node."""
    sql = MIGRATIONS_TABLE
    if cluster:
        _check_cluster(cluster)
        sql = sql.replace(".schema_migrations\n", f".schema_migrations ON CLUSTER {cluster}\n", 1)
        # No {shard} in the path: every node of every shard is a replica of this one table,
        # and the replica name carries the shard so that it is unique across the cluster.
        sql = _replicated(
            sql, path="/clickhouse/tables/{database}/schema_migrations", replica="{shard}-{replica}"
        )
    return Template(sql).substitute(db=database)


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


# What each table expires by, for the retention TTL: the start (UTC) of the UTC day its row's
# events are of (``seen`` for session_values: the last time a value was seen, so that a name
# stays while a kept row may need it). Every table then drops a day's rows at the same instant,
# N days after that day ended (``+ toIntervalDay(N + 1)`` below): the raw events of a day and
# its day, hour and 15-minute rollups leave together, and an event is kept at least N days. A
# TTL by each table's own time (``occurred_at``, ``bucket``, ``day``) dropped a day rollup's rows
# up to a day before their events, and the dashboard then disagreed with the raw table.
RETENTION_COLUMNS: dict[str, str] = {
    "events": "toDateTime(toDate(occurred_at), 'UTC')",
    "events_daily": "toDateTime(day, 'UTC')",
    "events_hourly": "toStartOfDay(hour)",
    "paths_daily": "toDateTime(day, 'UTC')",
    "referrers_daily": "toDateTime(day, 'UTC')",
    "clients_daily": "toDateTime(day, 'UTC')",
    "visitors_daily": "toDateTime(day, 'UTC')",
    "sessions_daily": "toDateTime(day, 'UTC')",
    "events_quarter": "toStartOfDay(bucket)",
    "visitors_quarter": "toStartOfDay(bucket)",
    "sessions_quarter": "toStartOfDay(bucket)",
    "audience_quarter": "toStartOfDay(bucket)",
    "session_values": "seen",
    "session_days": "toDateTime(day, 'UTC')",
    "event_visitors": "toStartOfDay(last_bucket)",
}


def retention_statements(
    engines: dict[str, str], days: int, database: str, cluster: str = ""
) -> list[str]:
    """The ALTERs that bring the TTL of events and rollups to ``days`` (0: none), given each
    table's current ``engine_full``. On a cluster the TTL belongs to the local tables.

    Refuses (ValueError) more than :data:`MAX_RETENTION_DAYS`: the TTL is a DateTime, which ends
    in 2106, and from 28,926 days on the expression wrapped to 1990, so that every event, the
    ones just stored included, was deleted by the next merge."""
    if days > MAX_RETENTION_DAYS:
        raise ValueError(
            f"a retention of {days} days is more than {MAX_RETENTION_DAYS} (about 27 years): "
            "its TTL would pass DateTime's end (2106) and expire every event at once; 0 keeps "
            "events forever"
        )
    out: list[str] = []
    for table, column in RETENTION_COLUMNS.items():
        name = table + LOCAL_SUFFIX if cluster else table
        on_cluster = f" ON CLUSTER {cluster}" if cluster else ""
        engine = engines.get(name, "")
        wanted = f"{column} + toIntervalDay({days + 1})"  # as ClickHouse prints it back
        if days > 0 and f"TTL {wanted}" not in engine:
            out.append(f"ALTER TABLE {database}.{name}{on_cluster} MODIFY TTL {wanted}")
        elif days <= 0 and " TTL " in engine:
            out.append(f"ALTER TABLE {database}.{name}{on_cluster} REMOVE TTL")
    return out


def apply_retention(storage: Storage, days: int) -> list[str]:
    """Keep ``days`` days of events and rollups (0: keep everything). Safe to repeat or change.
    Returns the ALTERs it ran: none when every table's TTL was already ``days``."""
    rows = storage.query(
        "SELECT name, engine_full FROM system.tables WHERE database = {db:String}",
        {"db": storage.database},
    )
    statements = retention_statements(dict(rows), days, storage.database, storage.cluster)
    if statements:
        check_room(storage)
    for statement in statements:
        storage.command(statement)
    return statements


def retention_report(statements: list[str], days: int) -> str | None:
    """What :func:`apply_retention` did, in words (None when it did nothing)."""
    if not statements:
        return None
    tables = f"{len(statements)} table{'s' if len(statements) != 1 else ''}"
    if days > 0:
        unit = "day" if days == 1 else "days"
        return f"retention: TTL of {days} {unit} set on {tables} (events and rollups)"
    return f"retention: TTL removed from {tables}, keeping all data (TALLY_RETENTION_DAYS=0)"


@dataclass(frozen=True)
class Migrated:
    """What :func:`migrate_schema` changed: the migrations new to the database and the retention
    ALTERs it ran."""

    new: list[str]
    retention: list[str]
    # Of ``new``: those recorded before with a text of other SQL, applied again (backfills too).
    again: list[str] = field(default_factory=list)


def migrate(storage: Storage, retention_days: int = 0) -> list[str]:
    """Apply every migration and the retention TTL; return the migrations new to this database.

    With ``storage.cluster`` set, everything is created on every node of that cluster.
    """
    return migrate_schema(storage, retention_days).new


class NoRoomForSchema(Exception):
    """The embedded engine's disk has too little free space to change the schema safely."""


# The free space the embedded engine's disk needs before Tally changes its schema. The engine
# writes a table's definition to a temporary file and renames it over the old one, and on a full
# disk it renamed an empty file over it (its write's ENOSPC unchecked): the folder could not be
# opened again, even once space was freed, and the acknowledged events in the ingest log never
# loaded. A definition is a few KB; this leaves room for those and the engine's own writes.
MIN_FREE_BYTES_FOR_DDL = 64 * 2**20


def check_room(storage: Storage, min_free_bytes: int = MIN_FREE_BYTES_FOR_DDL) -> None:
    """Refuse (:class:`NoRoomForSchema`) to change the embedded engine's schema with less than
    ``min_free_bytes`` free on its disk. A server's disk is the server's to watch."""
    if storage.target.kind != "chdb":
        return
    free = shutil.disk_usage(storage.target.path).free
    if free < min_free_bytes:
        raise NoRoomForSchema(
            f"the disk of {storage.target.path} has {free / 2**20:.1f} MiB free, less than the "
            f"{min_free_bytes / 2**20:.0f} MiB a schema change needs (on a full disk the engine "
            "can leave a table's definition empty, and the folder unreadable): free some space "
            "and start again"
        )


def migrate_schema(
    storage: Storage, retention_days: int = 0, min_free_bytes: int = MIN_FREE_BYTES_FOR_DDL
) -> Migrated:
    """:func:`migrate`, saying also which retention ALTERs it ran (``tally migrate`` reports
    them). A migration already recorded runs nothing again on one node; on a cluster its DDL is
    applied again (``IF NOT EXISTS``: it makes the tables of a node added since). Before any
    change to an embedded engine's schema, :func:`check_room`."""
    cluster = storage.cluster
    if cluster:
        # The node we talk to has the database already (Storage creates it); the others too now.
        storage.command(database_statement(storage.database, cluster))
    known = storage.query(
        "SELECT count() FROM system.tables WHERE database = {db:String} "
        "AND name = 'schema_migrations'",
        {"db": storage.database},
    )[0][0]
    if cluster or not known:
        check_room(storage, min_free_bytes)
        storage.command(migrations_table(storage.database, cluster))
    before = applied_versions(storage)
    new: list[str] = []
    again: list[str] = []
    for migration in load_migrations():
        state = migration.recorded_as(before.get(migration.version))
        recorded = state == "applied"
        if recorded and not cluster:
            # Its statements ran when it was recorded (it is recorded after its last one). Run
            # again at every start they changed nothing, yet the engine rewrote the definition
            # files of the tables they name (dozens a start), each a chance, on a full
            # disk, to leave one empty.
            continue
        check_room(storage, min_free_bytes)
        if state in ("changed", "unknown"):
            again.append(migration.name)
            log.warning(
                "%s was recorded with checksum %s, %s; applying it again, backfills included",
                migration.name,
                before[migration.version],
                "an earlier text of other SQL"
                if state == "changed"
                else "a text no release of Tally had (edited by hand?)",
            )
        for statement in migration.statements(storage.database, cluster):
            if recorded and _BACKFILL.match(statement):
                continue  # a one-time backfill: it ran when the migration was applied
            if guarded := _GUARDED.match(statement.strip()):
                _empty_if_cut_short(storage, guarded[2])
            storage.command(statement)
        if not recorded:
            storage.insert(
                f"{storage.database}.schema_migrations",
                [[migration.version], [migration.name], [migration.checksum]],
                ["version", "name", "checksum"],
            )
            new.append(migration.name)
            log.info("applied %s", migration.name)
    retention = apply_retention(storage, retention_days)
    return Migrated(new, retention, again)


def _empty_if_cut_short(storage: Storage, table: str) -> None:
    """Before a guarded backfill (``WHERE (SELECT count() FROM t) = 0``) of a migration not yet
    recorded: while no view writes to ``table`` (each such migration creates the view after its
    backfill), whatever the table holds is what an earlier run of this backfill stored before it
    was stopped. Its INSERT commits one part per month, so a kill between two left some months,
    the guard then saw a table that was not empty, and the rest were never filled (measured: a
    kill of `tally migrate` after the first of three parts left events_quarter with 1,225 of
    3,600 events, for good). Such a table is emptied, and the backfill fills it whole."""
    db, local = storage.database, table + (LOCAL_SUFFIX if storage.cluster else "")
    fed = storage.query(
        "SELECT count() FROM system.tables WHERE database = {db:String} "
        "AND engine = 'MaterializedView' AND position(create_table_query, {to:String}) > 0",
        {"db": db, "to": f" TO {db}.{local} "},
    )[0][0]
    if fed:
        return
    held = storage.query(f"SELECT count() FROM {db}.{table}")[0][0]
    if not held:
        return
    log.warning(
        "%s.%s holds %d rows of a backfill that was stopped before it finished: emptied, and "
        "filled again whole",
        db,
        table,
        held,
    )
    on_cluster = f" ON CLUSTER {storage.cluster}" if storage.cluster else ""
    storage.command(f"TRUNCATE TABLE {db}.{local}{on_cluster}")


def missing_migrations(storage: Storage) -> list[str] | None:
    """The migrations of this release that the database has not recorded as applied (not
    recorded, or recorded with an earlier text of other SQL): what ``tally serve --no-migrate``
    refuses to start without. None when it has recorded none at all (no schema yet). Creates
    nothing."""
    exists = storage.query(
        "SELECT count() FROM system.tables WHERE database = {db:String} "
        "AND name = 'schema_migrations'",
        {"db": storage.database},
    )
    before = applied_versions(storage) if exists[0][0] else {}
    if not before:
        return None
    return [
        m.name
        for m in load_migrations()
        if m.recorded_as(before.get(m.version)) in ("new", "changed")
    ]

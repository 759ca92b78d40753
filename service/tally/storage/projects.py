"""Projects and API keys in ClickHouse: versioned rows, current state read with FINAL."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime

from ..domain.ids import as_utc, hash_key, key_preview, new_api_key, next_version, object_id, utcnow
from .client import Storage

# Ownership answers kept in process. Only "yes" is kept: a project's owner never changes and a
# project is never deleted, so a yes stays true, while a no may turn (the project may be created
# on another worker a moment later).
OWNED_CACHE_SIZE = 10_000
DEFAULT_LABEL = "Default"
UNTITLED_LABEL = "Untitled"
KEY_COLUMNS = (
    "id",
    "project_id",
    "key_hash",
    "key_preview",
    "label",
    "created_at",
    "revoked_at",
    "updated_at",
    "version",
)


@dataclass(frozen=True)
class ProjectRow:
    id: str
    name: str
    created_at: datetime


@dataclass(frozen=True)
class KeyRow:
    id: str
    label: str
    key_preview: str
    created_at: datetime
    last_used_at: datetime | None


@dataclass(frozen=True)
class KeyRecord:
    """What the collect path needs to know about a key."""

    id: str
    project_id: str
    key_hash: str
    revoked: bool
    updated_at: datetime


class ProjectStore:
    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.db = storage.database
        self._owned: dict[tuple[str, str], None] = {}  # insertion order: oldest first
        self._owned_lock = threading.Lock()

    # --- projects ----------------------------------------------------------------------------
    def create_project(self, owner_id: str, name: str) -> tuple[ProjectRow, str, KeyRecord]:
        """Create a project and its ``Default`` key; return the project, the key and its record."""
        now = utcnow()
        project = ProjectRow(id=object_id(), name=name, created_at=now)
        self.storage.insert(
            f"{self.db}.projects",
            [[project.id], [owner_id], [name], [now], [next_version()]],
            ["id", "owner_id", "name", "created_at", "version"],
        )
        key, record = self.create_key(project.id, DEFAULT_LABEL)
        self._remember_owner(owner_id, project.id)
        return project, key, record

    def list_projects(self, owner_id: str) -> list[ProjectRow]:
        rows = self.storage.query(
            f"SELECT id, name, created_at FROM {self.db}.projects FINAL "
            "WHERE owner_id = {owner:String} ORDER BY created_at, id",
            {"owner": owner_id},
        )
        return [ProjectRow(id=r[0], name=r[1], created_at=r[2]) for r in rows]

    def owns(self, owner_id: str, project_id: str) -> bool:
        """Whether ``owner_id`` owns ``project_id``; a yes is remembered, a no asked again."""
        if (owner_id, project_id) in self._owned:
            return True
        rows = self.storage.query(
            f"SELECT count() FROM {self.db}.projects "
            "WHERE owner_id = {owner:String} AND id = {id:String}",
            {"owner": owner_id, "id": project_id},
        )
        owned = bool(rows and rows[0][0])
        if owned:
            self._remember_owner(owner_id, project_id)
        return owned

    def _remember_owner(self, owner_id: str, project_id: str) -> None:
        with self._owned_lock:
            self._owned[(owner_id, project_id)] = None
            while len(self._owned) > OWNED_CACHE_SIZE:
                del self._owned[next(iter(self._owned))]

    # --- keys --------------------------------------------------------------------------------
    def create_key(self, project_id: str, label: str | None) -> tuple[str, KeyRecord]:
        """Create a key; the full key is returned here and never again (only its hash is kept)."""
        key = new_api_key()
        now = utcnow()
        record = KeyRecord(
            id=object_id(),
            project_id=project_id,
            key_hash=hash_key(key),
            revoked=False,
            updated_at=now,
        )
        self._write_key(
            record.id,
            project_id,
            record.key_hash,
            key_preview(key),
            label or UNTITLED_LABEL,
            created_at=now,
            revoked_at=None,
            updated_at=now,
        )
        return key, record

    def list_keys(self, project_id: str) -> list[KeyRow]:
        rows = self.storage.query(
            f"""
            SELECT k.id, k.label, k.key_preview, k.created_at, u.last_used_at
            FROM (
                SELECT id, label, key_preview, created_at
                FROM {self.db}.api_keys FINAL
                WHERE project_id = {{project:String}} AND revoked_at IS NULL
            ) AS k
            LEFT JOIN (
                SELECT key_id, max(last_used_at) AS last_used_at
                FROM {self.db}.api_key_usage
                WHERE project_id = {{project:String}}
                GROUP BY key_id
            ) AS u ON u.key_id = k.id
            ORDER BY k.created_at, k.id
            SETTINGS join_use_nulls = 1
            """,
            {"project": project_id},
        )
        return [
            KeyRow(id=r[0], label=r[1], key_preview=r[2], created_at=r[3], last_used_at=r[4])
            for r in rows
        ]

    def revoke_key(self, project_id: str, key_id: str) -> KeyRecord | None:
        """Mark a key revoked; None when the project has no such live key."""
        rows = self.storage.query(
            f"SELECT id, key_hash, key_preview, label, created_at FROM {self.db}.api_keys FINAL "
            "WHERE project_id = {project:String} AND id = {id:String} AND revoked_at IS NULL",
            {"project": project_id, "id": key_id},
        )
        if not rows:
            return None
        kid, key_hash, preview, label, created_at = rows[0]
        now = utcnow()
        self._write_key(
            kid, project_id, key_hash, preview, label, created_at, revoked_at=now, updated_at=now
        )
        return KeyRecord(
            id=kid, project_id=project_id, key_hash=key_hash, revoked=True, updated_at=now
        )

    def _write_key(
        self,
        key_id: str,
        project_id: str,
        key_hash: str,
        preview: str,
        label: str,
        created_at: datetime,
        *,
        revoked_at: datetime | None,
        updated_at: datetime,
    ) -> None:
        """Write a new version of a key's row (ReplacingMergeTree keeps the highest version)."""
        self.storage.insert(
            f"{self.db}.api_keys",
            [
                [key_id],
                [project_id],
                [key_hash],
                [preview],
                [label],
                [created_at],
                [revoked_at],
                [updated_at],
                [next_version()],
            ],
            KEY_COLUMNS,
        )

    def key_changes(self, since: datetime | None) -> list[KeyRecord]:
        """Current state of every key changed at or after ``since`` (all keys when None)."""
        rows = self.storage.query(
            f"""
            SELECT id, argMax(project_id, version), argMax(key_hash, version),
                   argMax(revoked_at, version) IS NOT NULL, max(updated_at)
            FROM {self.db}.api_keys
            GROUP BY id
            HAVING max(updated_at) >= {{since:DateTime64(3, 'UTC')}}
            """,
            {"since": since or datetime(1970, 1, 1, tzinfo=UTC)},
        )
        return [
            KeyRecord(
                id=r[0], project_id=r[1], key_hash=r[2], revoked=bool(r[3]), updated_at=as_utc(r[4])
            )
            for r in rows
        ]

    def record_usage(self, usage: dict[str, tuple[str, datetime]]) -> None:
        """Store last-use times: ``{key_id: (project_id, last_used_at)}`` in one INSERT."""
        if not usage:
            return
        keys = list(usage)
        self.storage.insert(
            f"{self.db}.api_key_usage",
            [[usage[k][0] for k in keys], keys, [usage[k][1] for k in keys]],
            ["project_id", "key_id", "last_used_at"],
        )

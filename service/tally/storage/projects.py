"""Projects and API keys in ClickHouse: versioned rows, current state read with FINAL.

A project is changed (renamed, its zone or bot rule set) and deleted by writing a new version of
its row; a deleted one keeps its row with ``deleted_at`` set, and every read leaves it out."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

from ..domain.ids import (
    MARKER_VERSIONS,
    as_utc,
    follow_version,
    hash_key,
    key_preview,
    new_api_key,
    next_version,
    object_id,
    utcnow,
)
from ..domain.projects import DEFAULT_EXCLUDE_BOTS, DEFAULT_TIMEZONE, ProjectSettings
from .client import Storage
from .purge import purge_project

# Ownership and settings answers kept in process, per (owner, project). Only "yes" is kept (with
# the project's settings): a no may turn a moment later (the project created on another worker).
# A yes is forgotten at once when this process changes or deletes the project, and after
# SETTINGS_TTL_SECONDS otherwise: that bounds how long a PATCH or DELETE made by another process
# takes to show here (a deleted project's dashboard answers 404 everywhere within it).
OWNED_CACHE_SIZE = 10_000
SETTINGS_TTL_SECONDS = 5.0
PROJECT_COLUMNS = (
    "id",
    "owner_id",
    "name",
    "created_at",
    "timezone",
    "exclude_bots",
    "deleted_at",
    "version",
)
# A deleted marker's version is raised by this much (2^62, far above any microsecond count), so
# that it is the project's last version whatever is written after it: a PATCH of another process
# that read the project before the deletion writes a version that FINAL and merges discard.
DELETED_VERSION_OFFSET = MARKER_VERSIONS  # 1 << 62
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
    timezone: str = DEFAULT_TIMEZONE
    exclude_bots: bool = DEFAULT_EXCLUDE_BOTS
    # The version of the row it was read from (0: not read): a change writes a higher one.
    version: int = field(default=0, compare=False)

    @property
    def settings(self) -> ProjectSettings:
        return ProjectSettings(timezone=self.timezone, exclude_bots=self.exclude_bots)


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
    # The row's version: what a refresh compares (updated_at is a wall-clock time, and the clock
    # may have been set back since the row it replaces was written).
    version: int = 0


class ProjectStore:
    def __init__(
        self,
        storage: Storage,
        settings_ttl: float = SETTINGS_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.storage = storage
        self.db = storage.database
        self.settings_ttl = settings_ttl
        self._clock = clock
        # (owner, project) -> (settings, expires at); insertion order: oldest first
        self._owned: dict[tuple[str, str], tuple[ProjectSettings, float]] = {}
        self._owned_lock = threading.Lock()
        # Counts this process's changes of what it remembers (a write remembered, a project
        # forgotten): a read that began before one is not remembered (see owned_settings).
        self._changes = 0
        self._zones: set[str] = set()  # time zones the engine was found to know

    # --- projects ----------------------------------------------------------------------------
    def create_project(
        self, owner_id: str, name: str, timezone: str = DEFAULT_TIMEZONE
    ) -> tuple[ProjectRow, str, KeyRecord]:
        """Create a project and its ``Default`` key; return the project, the key and its record.

        ``name`` and ``timezone`` are taken as given: domain/projects.py checks them."""
        now = utcnow()
        project = ProjectRow(id=object_id(), name=name, created_at=now, timezone=timezone)
        self._write_project(owner_id, project, deleted_at=None)
        key, record = self.create_key(project.id, DEFAULT_LABEL)
        self._remember(owner_id, project.id, project.settings)
        return project, key, record

    def list_projects(self, owner_id: str) -> list[ProjectRow]:
        """The owner's projects, oldest first; deleted ones are left out."""
        rows = self.storage.query(
            f"SELECT id, name, created_at, timezone, exclude_bots FROM {self.db}.projects FINAL "
            "WHERE owner_id = {owner:String} AND deleted_at IS NULL ORDER BY created_at, id",
            {"owner": owner_id},
        )
        return [_project(r) for r in rows]

    def get_project(self, owner_id: str, project_id: str) -> ProjectRow | None:
        """The project as listed, when ``owner_id`` owns it and it is not deleted; with the
        version of its current row."""
        rows = self.storage.query(
            "SELECT id, name, created_at, timezone, exclude_bots, version "
            f"FROM {self.db}.projects FINAL "
            "WHERE owner_id = {owner:String} AND id = {id:String} AND deleted_at IS NULL",
            {"owner": owner_id, "id": project_id},
        )
        return _project(rows[0]) if rows else None

    def owned_settings(self, owner_id: str, project_id: str) -> ProjectSettings | None:
        """The project's settings when ``owner_id`` owns it (and it is not deleted), else None.

        One query, then remembered for ``settings_ttl`` seconds; this process's own changes
        replace or forget the remembered answer at once."""
        key = (owner_id, project_id)
        hit = self._owned.get(key)
        if hit is not None and hit[1] > self._clock():
            return hit[0]
        changes = self._changes
        project = self.get_project(owner_id, project_id)
        if project is None:
            self._forget(project_id)
            return None
        # A PATCH or DELETE here that ran while the row was read remembered the newer answer:
        # the row read may be the older one, and remembering it would serve it for the TTL.
        self._remember(owner_id, project_id, project.settings, read_after=changes)
        return project.settings

    def owns(self, owner_id: str, project_id: str) -> bool:
        """Whether ``owner_id`` owns ``project_id`` (not deleted); see :meth:`owned_settings`."""
        return self.owned_settings(owner_id, project_id) is not None

    def update_project(
        self,
        owner_id: str,
        project_id: str,
        *,
        name: str | None = None,
        timezone: str | None = None,
        exclude_bots: bool | None = None,
    ) -> ProjectRow | None:
        """Write a new version with the given fields changed; None when not the owner's.

        The new row's version is above the one read, whatever the clock says (a clock set back
        since the row was written would otherwise give the PATCH a lower version, and the
        table would keep the old row)."""
        current = self.get_project(owner_id, project_id)
        if current is None:
            self._forget(project_id)
            return None
        changes: dict[str, object] = {}
        if name is not None:
            changes["name"] = name
        if timezone is not None:
            changes["timezone"] = timezone
        if exclude_bots is not None:
            changes["exclude_bots"] = exclude_bots
        updated = replace(current, **changes)  # type: ignore[arg-type]
        version = next_version(current.version)
        self._write_project(owner_id, updated, deleted_at=None, version=version)
        self._remember(owner_id, project_id, updated.settings)
        return replace(updated, version=version)

    def revoke_project_keys(self, project_id: str) -> list[KeyRecord]:
        """Revoke every live key of the project in one INSERT; return their new records. Each
        revoked row's version is above the live row's it replaces, whatever the clock says."""
        rows = self.storage.query(
            "SELECT id, key_hash, key_preview, label, created_at, version "
            f"FROM {self.db}.api_keys FINAL "
            "WHERE project_id = {project:String} AND revoked_at IS NULL",
            {"project": project_id},
        )
        if not rows:
            return []
        now = utcnow()
        versions = [next_version(int(r[5])) for r in rows]
        self.storage.insert(
            f"{self.db}.api_keys",
            [
                [r[0] for r in rows],
                [project_id] * len(rows),
                [r[1] for r in rows],
                [r[2] for r in rows],
                [r[3] for r in rows],
                [r[4] for r in rows],
                [now] * len(rows),
                [now] * len(rows),
                versions,
            ],
            KEY_COLUMNS,
        )
        return [
            KeyRecord(
                id=r[0],
                project_id=project_id,
                key_hash=r[1],
                revoked=True,
                updated_at=now,
                version=version,
            )
            for r, version in zip(rows, versions, strict=True)
        ]

    def purge_project_rows(self, project_id: str) -> list[str]:
        """Delete the project's events, rollup rows and key usage from every table that holds
        them (storage/purge.py); return the tables."""
        return purge_project(self.storage, project_id)

    def mark_deleted(self, owner_id: str, project: ProjectRow) -> None:
        """Write the project's deleted marker and forget it here: it is no longer listed or
        owned."""
        self._write_project(
            owner_id, project, deleted_at=utcnow(), version=next_version() + DELETED_VERSION_OFFSET
        )
        self._forget(project.id)

    def zone_supported(self, timezone: str) -> bool:
        """Whether the engine knows ``timezone`` (the dashboard computes days in it)."""
        if timezone in self._zones:
            return True
        rows = self.storage.query(
            "SELECT count() FROM system.time_zones WHERE time_zone = {tz:String}",
            {"tz": timezone},
        )
        known = bool(rows and rows[0][0])
        if known:
            self._zones.add(timezone)
        return known

    def _write_project(
        self,
        owner_id: str,
        project: ProjectRow,
        *,
        deleted_at: datetime | None,
        version: int | None = None,
    ) -> None:
        """Write a new version of a project's row (ReplacingMergeTree keeps the highest)."""
        self.storage.insert(
            f"{self.db}.projects",
            [
                [project.id],
                [owner_id],
                [project.name],
                [project.created_at],
                [project.timezone],
                [1 if project.exclude_bots else 0],
                [deleted_at],
                [next_version() if version is None else version],
            ],
            PROJECT_COLUMNS,
        )

    def _remember(
        self,
        owner_id: str,
        project_id: str,
        settings: ProjectSettings,
        read_after: int | None = None,
    ) -> None:
        """Remember ``settings``: a change this process wrote, or (``read_after``, the change
        count when the read began) a row read, unless a change was remembered since."""
        with self._owned_lock:
            if read_after is None:
                self._changes += 1
            elif read_after != self._changes:
                return
            self._owned.pop((owner_id, project_id), None)
            self._owned[(owner_id, project_id)] = (settings, self._clock() + self.settings_ttl)
            while len(self._owned) > OWNED_CACHE_SIZE:
                del self._owned[next(iter(self._owned))]

    def _forget(self, project_id: str) -> None:
        with self._owned_lock:
            self._changes += 1
            for key in [k for k in self._owned if k[1] == project_id]:
                del self._owned[key]

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
            version=next_version(),
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
            version=record.version,
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
            # Aware UTC, as the registry's pending last uses they are compared with (the
            # engine returns max()'s DateTime64 without its zone).
            KeyRow(
                id=r[0],
                label=r[1],
                key_preview=r[2],
                created_at=as_utc(r[3]),
                last_used_at=None if r[4] is None else as_utc(r[4]),
            )
            for r in rows
        ]

    def revoke_key(self, project_id: str, key_id: str) -> KeyRecord | None:
        """Mark a key revoked; None when the project has no such live key. The revoked row's
        version is above the live row's it replaces, whatever the clock says."""
        rows = self.storage.query(
            "SELECT id, key_hash, key_preview, label, created_at, version "
            f"FROM {self.db}.api_keys FINAL "
            "WHERE project_id = {project:String} AND id = {id:String} AND revoked_at IS NULL",
            {"project": project_id, "id": key_id},
        )
        if not rows:
            return None
        kid, key_hash, preview, label, created_at, current = rows[0]
        now = utcnow()
        version = next_version(int(current))
        self._write_key(
            kid,
            project_id,
            key_hash,
            preview,
            label,
            created_at,
            revoked_at=now,
            updated_at=now,
            version=version,
        )
        return KeyRecord(
            id=kid,
            project_id=project_id,
            key_hash=key_hash,
            revoked=True,
            updated_at=now,
            version=version,
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
        version: int,
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
                [version],
            ],
            KEY_COLUMNS,
        )

    def key_changes(self, since: int | None) -> list[KeyRecord]:
        """Current state of every key with a row of version ``since`` or above (all keys when
        None). Versions, not ``updated_at``: a row written after the clock was set back carries
        an older time than rows written before, never a lower version than the row it replaces
        (:func:`next_version`). This process's versions follow the highest one read."""
        rows = self.storage.query(
            f"""
            SELECT id, argMax(project_id, version), argMax(key_hash, version),
                   argMax(revoked_at, version) IS NOT NULL, argMax(updated_at, version),
                   max(version)
            FROM {self.db}.api_keys
            GROUP BY id
            HAVING max(version) >= {{since:UInt64}}
            """,
            {"since": since or 0},
        )
        records = [
            KeyRecord(
                id=r[0],
                project_id=r[1],
                key_hash=r[2],
                revoked=bool(r[3]),
                updated_at=as_utc(r[4]),
                version=int(r[5]),
            )
            for r in rows
        ]
        if records:
            follow_version(max(r.version for r in records))
        return records

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


def _project(row: tuple[object, ...]) -> ProjectRow:
    return ProjectRow(
        id=str(row[0]),
        name=str(row[1]),
        created_at=as_utc(row[2]),  # type: ignore[arg-type]
        timezone=str(row[3]),
        exclude_bots=bool(row[4]),
        version=int(row[5]) if len(row) > 5 else 0,  # type: ignore[call-overload]
    )

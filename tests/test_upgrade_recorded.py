"""A migration recorded by an earlier release is not applied again when its file changed only in
comments or whitespace since (schema 014's and 015's header comments were reworded after release):
its one-time backfill ran then. `tally migrate` printed "applied 2 migration(s) ...:
015_events_by_referrer, 016_column_comments" on a database of release 120a0c0, and
system.mutations showed MATERIALIZE PROJECTION by_referrer twice. A recorded text whose SQL
differs (schema 012 as first released) is applied again, backfill included: it lacks what the
later text adds."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from conftest import apply_recorded, migrate_before
from tally.storage.client import Storage, parse_url
from tally.storage.migrate import (
    RECORDED_TEXTS,
    Migration,
    load_migrations,
    migrate,
    migrate_schema,
    missing_migrations,
    sql_text,
)

REPO = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True
    ).stdout


def _history_available() -> bool:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        return False
    try:
        # a shallow clone (CI's, say) holds only some of the texts
        return _git("rev-parse", "--is-shallow-repository").strip() == "false"
    except subprocess.CalledProcessError:
        return False


needs_history = pytest.mark.skipif(
    not _history_available(), reason="needs the git history of schema/"
)


def _checksum(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def earlier_text(commit: str, name: str) -> str:
    """A schema file as it was at ``commit`` (a release that recorded it)."""
    return _git("show", f"{commit}:schema/{name}.sql")


def test_sql_text_leaves_out_comments_and_whitespace_only():
    text = "-- heading\nALTER TABLE ${db}.t  ADD COLUMN x UInt8 -- why\n   COMMENT 'a  -- b';\n"
    assert sql_text(text) == "ALTER TABLE ${db}.t ADD COLUMN x UInt8 COMMENT 'a  -- b';"
    assert sql_text("SELECT /* x */ 1") == sql_text("SELECT\n\t1") == "SELECT 1"
    # what is SQL is kept: a literal's or a column comment's words, quotes left open, operators
    assert sql_text("COMMENT 'a  b'") != sql_text("COMMENT 'a b'")
    assert sql_text("SELECT 'it''s' - 1 / 2 'open") == "SELECT 'it''s' - 1 / 2 'open"


def test_current_schema_files_are_known_texts():
    """Pins :func:`sql_text` too: changing how it reads a text would make every record count as
    changed. A file edited (only a comment, say) adds its new checksum here."""
    for migration in load_migrations():
        known = RECORDED_TEXTS.get(migration.version, {})
        assert known.get(migration.checksum) == migration.sql_checksum, (
            f"{migration.name}: add {migration.checksum!r}: {migration.sql_checksum!r} to "
            "RECORDED_TEXTS (and keep the earlier entries)"
        )
        assert migration.recorded_as(migration.checksum) == "applied"
        assert migration.recorded_as(None) == "new"
        assert migration.recorded_as("0" * 16) == "unknown"


@needs_history
def test_every_text_a_release_recorded_is_known_with_its_sql():
    """Every version of every schema file in the repository's history is in RECORDED_TEXTS with
    the checksum of its SQL (so an entry is an earlier text's checksum, computed, not typed), and
    every entry is such a version."""
    found: dict[int, dict[str, str]] = {}
    blobs: set[str] = set()
    for commit in _git("rev-list", "--all").split():
        for line in _git("ls-tree", commit, "schema/").splitlines():
            meta, path = line.split("\t")
            blob = meta.split()[2]
            name = Path(path).name
            if blob in blobs or not name[:3].isdigit() or not name.endswith(".sql"):
                continue
            blobs.add(blob)
            text = _git("cat-file", "blob", blob)
            found.setdefault(int(name[:3]), {})[_checksum(text)] = _checksum(sql_text(text))
    assert found == RECORDED_TEXTS
    # As classified in migrate.py: comments only for 014 and 015, other SQL for 002 and 012.
    current = {m.version: m for m in load_migrations()}
    changed = sorted(
        v for v, texts in found.items() for s in texts.values() if s != current[v].sql_checksum
    )
    assert changed == [2, 12]


def _mutations(storage: Storage, projection: str) -> int:
    return int(
        storage.query(
            "SELECT count() FROM system.mutations WHERE database = {d:String} "
            "AND command LIKE {c:String}",
            {"d": storage.database, "c": f"%MATERIALIZE PROJECTION {projection}%"},
        )[0][0]
    )


def _insert_events(storage: Storage, project: str, n: int) -> None:
    values = ", ".join(
        f"('{project}', '{name}', now64(3) - {i}, now64(3), '/p{i % 3}', 's{i % 4}', "
        f"'v{i % 5}', {'1500' if name == 'session_end' and i % 2 else 'NULL'})"
        for i in range(n)
        for name in ("pageview", "session_end")
    )
    storage.command(
        f"INSERT INTO {storage.database}.events (project_id, name, occurred_at, received_at, "
        f"path, session_id, visitor_id, duration_ms) VALUES {values}"
    )


@needs_history
def test_a_comment_only_change_since_release_is_not_applied_again(chdb_path):
    """A database of release 120a0c0 (014 as of 7ed35d5, 015 as of 120a0c0, both changed since in
    comments only), with events: the current migrate applies 016 alone; no projection is
    materialized a second time, no row is added, and the records are left as they were."""
    storage = Storage(parse_url(f"chdb://{chdb_path}?database=o_{uuid.uuid4().hex[:10]}"), 1)
    db = storage.database
    try:
        migrate_before(storage, 14)
        for version, commit, name in (
            (14, "7ed35d5", "014_events_by_audience"),
            (15, "120a0c0", "015_events_by_referrer"),
        ):
            old = Migration(version, name, earlier_text(commit, name))
            assert old.checksum in RECORDED_TEXTS[version]
            apply_recorded(storage, old)
        _insert_events(storage, "p" * 24, 40)
        counts = f"SELECT table, sum(rows) FROM system.parts WHERE database = '{db}' AND active "
        # session_days (019) and event_visitors (020) are new, filled from the stored events: not
        # among those before.
        counts += "AND table NOT IN ('schema_migrations', 'session_days', 'event_visitors') "
        counts += "GROUP BY table ORDER BY table"
        rows = storage.query(counts)
        records = storage.query(f"SELECT version, checksum FROM {db}.schema_migrations ORDER BY 1")
        assert _mutations(storage, "by_referrer") == _mutations(storage, "by_audience") == 1

        done = migrate_schema(storage)

        assert done.again == []
        assert done.new == [
            "016_column_comments",
            "017_event_id_comment",
            "018_event_id_hash_comments",
            "019_exact_durations",
            "020_event_visitors",
        ]
        assert _mutations(storage, "by_referrer") == _mutations(storage, "by_audience") == 1
        assert storage.query(counts) == rows
        after = storage.query(f"SELECT version, checksum FROM {db}.schema_migrations ORDER BY 1")
        assert after[:-5] == records and [v for v, _ in after[-5:]] == [16, 17, 18, 19, 20]
        assert migrate(storage) == [] and missing_migrations(storage) == []
    finally:
        storage.close()


@needs_history
def test_schema_012_as_first_released_is_applied_again_with_its_backfill(chdb_path):
    """Schema 012 at 3746593 lacked the ends_unstated/ends_stated columns of sessions_quarter (added
    by e24fd2d with their view and backfill). A database that recorded it is migrated again: the
    session_end events stored before get their ends (the filtered dashboard's session durations),
    and once is enough."""
    storage = Storage(parse_url(f"chdb://{chdb_path}?database=q_{uuid.uuid4().hex[:10]}"), 1)
    db = storage.database
    try:
        assert missing_migrations(storage) is None  # no schema yet: nothing recorded
        migrate_before(storage, 12)
        name = "012_session_first_values"
        apply_recorded(storage, Migration(12, name, earlier_text("3746593", name)))
        _insert_events(storage, "q" * 24, 20)
        assert missing_migrations(storage) == [name, *[m.name for m in load_migrations()[12:]]]

        done = migrate_schema(storage)

        assert done.again == [name] and done.new[0] == name
        ends = (
            f"SELECT length(arrayDistinct(groupArrayArray(ends_stated))), "
            f"length(arrayDistinct(groupArrayArray(ends_unstated))) FROM {db}.sessions_quarter"
        )
        assert storage.query(ends) == [(10, 10)]
        assert migrate(storage) == [] and missing_migrations(storage) == []
    finally:
        storage.close()

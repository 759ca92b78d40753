"""Schema migrations: ordered, recorded, and idempotent on a fresh database."""

from __future__ import annotations

import uuid

import pytest

from conftest import COLUMNS_BEFORE_005, migrate_before
from tally.storage.client import Storage, parse_url
from tally.storage.migrate import load_migrations, migrate, schema_dir


def snapshot(storage: Storage) -> list[tuple]:
    return storage.query(
        "SELECT name, engine, create_table_query FROM system.tables "
        "WHERE database = {db:String} AND name != 'schema_migrations' ORDER BY name",
        {"db": storage.database},
    )


def test_migrations_apply_in_order_and_twice_change_nothing(chdb_path):
    target = parse_url(f"chdb://{chdb_path}?database=m_{uuid.uuid4().hex[:10]}")
    storage = Storage(target, pool_size=1)
    try:
        names = [m.name for m in load_migrations()]
        assert names == sorted(names) and names[0].startswith("001_")
        assert migrate(storage) == names
        first = snapshot(storage)
        assert {"events", "events_daily", "projects", "api_keys"} <= {row[0] for row in first}
        assert migrate(storage) == []
        assert snapshot(storage) == first
        recorded = storage.query(
            f"SELECT version, name FROM {storage.database}.schema_migrations FINAL ORDER BY version"
        )
        assert [name for _, name in recorded] == names
    finally:
        storage.close()


def row_counts(storage: Storage) -> dict[str, int]:
    """Rows stored per table, merged or not (every part's rows)."""
    return dict(
        storage.query(
            "SELECT table, sum(rows) FROM system.parts WHERE database = {db:String} AND active "
            "AND table != 'schema_migrations' GROUP BY table",
            {"db": storage.database},
        )
    )


def test_applied_backfills_do_not_run_again_at_the_next_start(chdb_path):
    """``tally serve`` migrates at every start: a migration already recorded applies its DDL again
    but not its backfills (INSERT ... SELECT over the stored events), which would re-read every
    event and, for schema 012's, store a second copy of its sessions_quarter rows."""
    from tally.storage.writer import events_inserter
    from test_writer import event_row

    target = parse_url(f"chdb://{chdb_path}?database=b_{uuid.uuid4().hex[:10]}")
    storage = Storage(target, pool_size=1)
    try:
        migrate(storage)
        insert = events_inserter(storage)
        rows = [
            event_row("d" * 24, "pageview", f"/p{i % 7}", session=f"s{i % 11}", visitor=f"v{i}")
            for i in range(60)
        ]
        insert(rows, uuid.uuid4().hex)
        stored = row_counts(storage)
        assert stored["sessions_quarter"] > 0 and stored["session_values"] > 0
        assert migrate(storage) == []
        assert row_counts(storage) == stored
    finally:
        storage.close()


def test_a_start_on_an_up_to_date_schema_rewrites_no_table_definition(chdb_path):
    """`tally serve` migrates at every start. A migration already recorded applied its DDL again
    (IF NOT EXISTS: no change), yet the engine rewrote the definition files of the tables it
    named, dozens a start; on a full disk it renamed an empty one over ``sessions_daily.sql``
    and the folder could not be opened again. On one node a recorded migration runs nothing."""
    import time

    target = parse_url(f"chdb://{chdb_path}?database=r_{uuid.uuid4().hex[:10]}")
    storage = Storage(target, pool_size=1)
    definitions = (
        "SELECT name, metadata_modification_time FROM system.tables WHERE database = {db:String} "
        "ORDER BY name"
    )
    try:
        migrate(storage, retention_days=30)
        before = storage.query(definitions, {"db": storage.database})
        assert len(before) > 20
        time.sleep(1.1)  # the times are in whole seconds
        assert migrate(storage, retention_days=30) == []
        assert storage.query(definitions, {"db": storage.database}) == before
    finally:
        storage.close()


def test_no_schema_change_on_a_disk_without_room(chdb_path):
    """Below the free space a schema change needs (MIN_FREE_BYTES_FOR_DDL; here a need larger
    than the disk has), a new database gets no table and nothing is recorded, and ``tally
    migrate`` says why in a line; an up-to-date one migrates as before, since nothing changes."""
    import shutil

    from tally.storage.migrate import NoRoomForSchema, migrate_schema

    free = shutil.disk_usage(chdb_path).free
    target = parse_url(f"chdb://{chdb_path}?database=n_{uuid.uuid4().hex[:10]}")
    storage = Storage(target, pool_size=1)
    tables = "SELECT count() FROM system.tables WHERE database = {db:String}"
    try:
        with pytest.raises(NoRoomForSchema, match=r"MiB free, less than the .* free some space"):
            migrate_schema(storage, min_free_bytes=free + 2**40)
        assert storage.query(tables, {"db": storage.database}) == [(0,)]
        migrate_schema(storage)
        assert migrate_schema(storage, min_free_bytes=free + 2**40).new == []
    finally:
        storage.close()


def test_a_backfill_after_a_comment_does_not_run_again_either(chdb_path):
    """Schema 007's events_quarter backfill is preceded by a comment, which hid it from the
    backfill check: it ran at every start, and filled the table from ``events`` whenever the table
    was empty while ``events`` was not. A crash between the commit of an INSERT's ``events`` part
    and its events_quarter part leaves just that; the restart then filled events_quarter from
    ``events`` and the reload of the segment added the same events again (counted twice; found
    by tests/faults/test_insert_crash.py). Here the table is emptied by hand instead."""
    from tally.storage.migrate import _BACKFILL
    from tally.storage.writer import events_inserter
    from test_writer import event_row

    fills = [
        (migration.name, statement)
        for migration in load_migrations()
        for statement in migration.statements("db")
        if "INSERT INTO" in statement or " MATERIALIZE PROJECTION" in statement
    ]
    assert len(fills) >= 9
    assert [name for name, statement in fills if not _BACKFILL.match(statement)] == []

    target = parse_url(f"chdb://{chdb_path}?database=c_{uuid.uuid4().hex[:10]}")
    storage = Storage(target, pool_size=1)
    try:
        migrate(storage)
        events_inserter(storage)([event_row("e" * 24, "pageview", "/a")], uuid.uuid4().hex)
        storage.command(f"TRUNCATE TABLE {storage.database}.events_quarter")
        assert migrate(storage) == []
        assert row_counts(storage).get("events_quarter", 0) == 0
    finally:
        storage.close()


# Every schema file's checksum as released. `tally migrate` records it. A file whose SQL changed
# counts as not applied where it was recorded, and its one-time backfills (INSERT ... SELECT,
# MATERIALIZE PROJECTION) run again at the next start of every deployment; a change of comments
# only is recognised (migrate.RECORDED_TEXTS, tests/test_upgrade_recorded.py) but still needs its
# checksum listed there. A change goes in a new numbered file, whose checksum is added here when
# it lands.
RELEASED = {
    1: "d6f325b724c4b5d6",
    2: "39bc2010c2974eff",
    3: "050cedbc3baf551b",
    4: "9f4774daa1140b45",
    5: "f1084c81e68f8873",
    6: "41e85bcfa3fb4db6",
    7: "768d0436ec9a05b2",
    8: "4ae5099de9f01868",
    9: "9d82b552e60e1f15",
    10: "3c6bec39e67d6994",
    11: "e269f0658146a13a",
    12: "59002a9393b45a63",
    13: "c8623bc369b58a72",
    14: "b96c90d9e4fc2fec",
    15: "472846f45021a40b",
    16: "b602f04aa0e90db6",
    17: "ecd577de1779e0fc",
    18: "ee549c2196359119",
    19: "a99c507463cd7e33",
    20: "4e4bc06fd34fd77a",
}


def test_released_schema_files_never_change():
    now = {m.version: m.checksum for m in load_migrations()}
    changed = sorted(v for v, c in RELEASED.items() if now.get(v) != c)
    assert not changed, f"schema files {changed} changed after release; add a new file instead"
    assert now.keys() == RELEASED.keys(), "a new schema file: add its checksum to RELEASED"


def test_schema_ships_with_the_package():
    folder = schema_dir()
    assert (folder / "001_events.sql").is_file()


def test_every_rollup_is_fed_by_a_view(client):
    storage = client.app.state.storage
    views = storage.query(
        "SELECT name, create_table_query FROM system.tables "
        "WHERE database = {db:String} AND engine = 'MaterializedView'",
        {"db": storage.database},
    )
    targets = {q.split(" TO ", 1)[1].split()[0].split(".")[-1] for _, q in views}
    assert targets == {
        "events_daily",
        "events_hourly",
        "paths_daily",
        "referrers_daily",
        "clients_daily",
        "visitors_daily",
        "sessions_daily",
        "events_quarter",
        "visitors_quarter",
        "sessions_quarter",
        "audience_quarter",
        "session_values",
        "session_days",
        "event_visitors",
    }


def test_retention_ttl_expires_old_data_and_can_be_changed(chdb_path):
    from datetime import UTC, datetime, timedelta

    from tally.storage.migrate import RETENTION_COLUMNS
    from tally.storage.writer import events_inserter

    storage = Storage(parse_url(f"chdb://{chdb_path}?database=r_{uuid.uuid4().hex[:10]}"), 1)
    try:
        migrate(storage, retention_days=30)

        def engines() -> dict[str, str]:
            return dict(
                storage.query(
                    "SELECT name, engine_full FROM system.tables WHERE database = {db:String}",
                    {"db": storage.database},
                )
            )

        # A day's rows leave every table together, N days after the day ended.
        assert all("toIntervalDay(31)" in engines()[t] for t in RETENTION_COLUMNS)
        now = datetime.now(UTC)
        old, recent = (int((now - timedelta(days=d)).timestamp()) for d in (40, 2))
        client = ("", "", "", None, "{}", "", "", "k")  # browser ... key_id
        dims = ("Direct / None", "Direct", "", "", "", "", "", "Unknown", 0)  # schema 005
        rows = [
            ("p" * 24, "pageview", t, t, "/", "", "", "s", "v", *client, *dims)
            for t in (old, recent)
        ]
        events_inserter(storage)(rows, uuid.uuid4().hex)
        for table in RETENTION_COLUMNS:
            storage.command(f"OPTIMIZE TABLE {storage.database}.{table} FINAL")
        assert storage.query(f"SELECT count() FROM {storage.database}.events")[0][0] == 1
        assert storage.query(f"SELECT sum(events) FROM {storage.database}.events_daily")[0][0] == 1

        migrate(storage, retention_days=90)  # changed later
        assert all("toIntervalDay(91)" in engines()[t] for t in RETENTION_COLUMNS)
        migrate(storage, retention_days=0)  # back to keeping everything
        assert all(" TTL " not in engines()[t] for t in RETENTION_COLUMNS)
    finally:
        storage.close()


def test_retention_drops_a_days_rows_from_every_table_together(chdb_path):
    """Kept N days: an event of N days ago less two minutes is in the raw table and in every
    rollup (a TTL by each table's own day or bucket dropped the day rollups' rows up to a day
    earlier, and the dashboard said 3 where the raw table and v2 said 6); one of N + 2 days ago
    is in none."""
    from datetime import UTC, datetime, timedelta

    from tally.storage.migrate import RETENTION_COLUMNS
    from tally.storage.writer import events_inserter

    storage = Storage(parse_url(f"chdb://{chdb_path}?database=k_{uuid.uuid4().hex[:10]}"), 1)
    db = storage.database
    try:
        migrate(storage, retention_days=5)
        now = datetime.now(UTC)
        client = ("", "", "", None, "{}", "", "", "k")  # browser ... key_id
        dims = ("Direct / None", "Direct", "", "", "", "", "", "Unknown", 0)  # schema 005
        ages = {"kept": timedelta(days=5) - timedelta(minutes=2), "gone": timedelta(days=7)}
        rows = []
        for name, age in ages.items():
            t = int((now - age).timestamp())
            rows.append(("p" * 24, "pageview", t, t, f"/{name}", "", "", f"s{name}", f"v{name}"))
        rows = [(*row, *client, *dims) for row in rows]
        events_inserter(storage)(rows, uuid.uuid4().hex)
        for table in RETENTION_COLUMNS:
            storage.command(f"OPTIMIZE TABLE {db}.{table} FINAL")
        assert storage.query(f"SELECT path FROM {db}.events") == [("/kept",)]
        for table, column in (("events_daily", "events"), ("events_quarter", "events")):
            assert storage.query(f"SELECT sum({column}) FROM {db}.{table}") == [(1,)], table
        for table in ("paths_daily", "sessions_daily", "visitors_daily", "visitors_quarter"):
            assert storage.query(f"SELECT count() FROM {db}.{table}") == [(1,)], table
    finally:
        storage.close()


def test_one_node_rendering_is_the_files_as_written():
    """Without a cluster every statement is its file's text with ${db} replaced: nothing
    changes for embedded or single-server deployments."""
    from string import Template

    from tally.storage.migrate import MIGRATIONS_TABLE, database_statement, migrations_table

    for migration in load_migrations():
        text = Template(migration.sql).substitute(db="analytics")
        statements = migration.statements("analytics")
        assert statements == migration.statements("analytics", cluster="")
        for statement in statements:
            assert statement in text
        covered = "".join(statements)
        for line in text.splitlines():
            if line.strip() and not line.strip().startswith("--"):
                assert line.rstrip(";") in covered
        assert not any(
            word in covered for word in ("ON CLUSTER", "Replicated", "Distributed", "_local")
        )
    assert migrations_table("analytics") == MIGRATIONS_TABLE.replace("${db}", "analytics")
    assert database_statement("analytics") == "CREATE DATABASE IF NOT EXISTS analytics"


def test_cluster_rendering_refuses_what_it_does_not_know():

    from tally.storage.migrate import render_for_cluster

    with pytest.raises(ValueError, match="no sharding key"):
        render_for_cluster(
            "CREATE TABLE IF NOT EXISTS ${db}.other\n(a UInt8)\nENGINE = MergeTree", "c"
        )
    with pytest.raises(ValueError, match="does not know how to render"):
        render_for_cluster("ALTER TABLE ${db}.events DROP COLUMN x", "c")
    with pytest.raises(ValueError, match="invalid cluster name"):
        render_for_cluster("CREATE TABLE IF NOT EXISTS ${db}.events\n", "c; DROP")
    with pytest.raises(ValueError, match="not a storage table"):
        render_for_cluster("ALTER TABLE ${db}.other ADD PROJECTION p (SELECT a ORDER BY a)", "c")


def test_cluster_rendering_alters_where_the_rows_are():
    """A projection or a MergeTree setting belongs to the local tables, where the rows are."""
    from tally.storage.migrate import render_for_cluster

    (sessions_daily,) = [m for m in load_migrations() if m.version == 4]
    rendered = sessions_daily.statements("tally", "c")
    assert len(rendered) == len(sessions_daily.statements("tally")) == 2
    assert rendered[0] == (
        "ALTER TABLE tally.sessions_daily_local ON CLUSTER c "
        "MODIFY SETTING deduplicate_merge_projection_mode = 'rebuild'"
    )
    assert rendered[1].startswith(
        "ALTER TABLE tally.sessions_daily_local ON CLUSTER c "
        "ADD PROJECTION IF NOT EXISTS ends_daily"
    )
    assert render_for_cluster(
        "ALTER TABLE ${db}.sessions_daily MATERIALIZE PROJECTION ends_daily", "c"
    ) == ["ALTER TABLE ${db}.sessions_daily_local ON CLUSTER c MATERIALIZE PROJECTION ends_daily"]


def test_cluster_rendering_adds_columns_to_both_tables():
    """The local tables store the column; the Distributed table must know it to pass it on."""
    from tally.storage.migrate import render_for_cluster

    assert render_for_cluster(
        "ALTER TABLE ${db}.events ADD COLUMN IF NOT EXISTS x UInt8 DEFAULT 0", "c"
    ) == [
        "ALTER TABLE ${db}.events_local ON CLUSTER c ADD COLUMN IF NOT EXISTS x UInt8 DEFAULT 0",
        "ALTER TABLE ${db}.events ON CLUSTER c ADD COLUMN IF NOT EXISTS x UInt8 DEFAULT 0",
    ]
    # a comment too (schema 016): analysts read either table's system.columns
    assert render_for_cluster("ALTER TABLE ${db}.events COMMENT COLUMN x 'y'", "c") == [
        "ALTER TABLE ${db}.events_local ON CLUSTER c COMMENT COLUMN x 'y'",
        "ALTER TABLE ${db}.events ON CLUSTER c COMMENT COLUMN x 'y'",
    ]
    with pytest.raises(ValueError, match="not a storage table"):
        render_for_cluster("ALTER TABLE ${db}.other ADD COLUMN x UInt8", "c")


def test_cluster_statements_parse_on_the_engine(client):
    """ClickHouse's own parser accepts every statement of cluster mode as rendered."""
    from tally.storage.migrate import (
        database_statement,
        migrations_table,
        retention_statements,
    )

    storage = client.app.state.storage
    statements = [
        database_statement("tally", "tally_cluster"),
        migrations_table("tally", "tally_cluster"),
    ]
    for migration in load_migrations():
        statements += migration.statements("tally", "tally_cluster")
    statements += retention_statements({}, 30, "tally", "tally_cluster")
    statements += retention_statements(
        {"events_local": "MergeTree ... TTL x SETTINGS"}, 0, "tally", "tally_cluster"
    )
    for statement in statements:
        formatted = storage.query("SELECT formatQuery({q:String})", {"q": statement})[0][0]
        if formatted.startswith("INSERT INTO"):  # a backfill: through the Distributed tables
            assert "_local" not in formatted, statement
            continue
        assert "ON CLUSTER tally_cluster" in formatted, statement


def test_sharding_by_project_is_the_same_for_every_table(client):
    """events hold project_id as LowCardinality(String), projects and keys as String: the
    sharding key must hash both alike, or a tenant's rows would be on different shards."""
    storage = client.app.state.storage
    same = storage.query(
        "SELECT cityHash64(toLowCardinality({p:String})) = cityHash64({p:String})",
        {"p": "0123456789abcdef01234567"},
    )[0][0]
    assert same == 1


def test_retention_in_cluster_mode_alters_the_local_tables():
    from tally.storage.migrate import RETENTION_COLUMNS, retention_statements

    statements = retention_statements({}, 30, "tally", "c")
    assert len(statements) == len(RETENTION_COLUMNS)
    assert statements[0] == (
        "ALTER TABLE tally.events_local ON CLUSTER c MODIFY TTL "
        "toDateTime(toDate(occurred_at), 'UTC') + toIntervalDay(31)"
    )
    current = {
        f"{t}_local": f"MergeTree TTL {c} + toIntervalDay(31)" for t, c in RETENTION_COLUMNS.items()
    }
    assert retention_statements(current, 30, "tally", "c") == []
    assert all(
        s.endswith("ON CLUSTER c REMOVE TTL")
        for s in retention_statements(current, 0, "tally", "c")
    )


def test_upgrade_to_the_session_ends_projection_keeps_answers_exact(chdb_path):
    """A database written under schema 001-003 gets the session_end projection (004, split by bot
    flag as ends_daily_bots in 007): parts from before the upgrade lack it and are read from the
    table, so the sums are exact at once, and stay so once `MATERIALIZE PROJECTION` has built it
    for them (docs/operations.md)."""
    from datetime import UTC, datetime, timedelta

    import msgspec

    from tally.storage.writer import INSERT_SETTINGS

    storage = Storage(parse_url(f"chdb://{chdb_path}?database=u_{uuid.uuid4().hex[:10]}"), 1)
    db = storage.database
    try:
        migrate_before(storage, 4)  # the schema before 004, as migrate records it
        now = datetime.now(UTC)

        def session(n: int, stated: float | None) -> list[tuple]:
            """A pageview, then a session_end 8 minutes later (its duration stated or not)."""
            start, end = (int((now - timedelta(days=n % 5, minutes=m)).timestamp()) for m in (9, 1))
            ids = ("", "", f"s{n}", "v", "", "", "")  # url, referrer, session, visitor, client
            return [
                ("p" * 24, "pageview", start, start, "/", *ids, None, "{}", "", "", "k"),
                ("p" * 24, "session_end", end, end, "", *ids, stated, "{}", "", "", "k"),
            ]

        def insert(rows: list[tuple], token: str) -> None:
            """Rows in the columns of schema 001-003 (EVENT_COLUMNS grew with schema 005)."""
            storage.raw_insert(
                f"{db}.events",
                COLUMNS_BEFORE_005,
                msgspec.json.Encoder().encode_lines(rows),
                fmt="JSONCompactEachRow",
                settings={**INSERT_SETTINGS, "insert_deduplication_token": token},
            )

        insert([r for n in range(6) for r in session(n, None)], uuid.uuid4().hex)  # before

        def lacking() -> int:
            rows = storage.query(
                "SELECT count() FROM system.parts WHERE database = {d:String} "
                "AND table = 'sessions_daily' AND active "
                "AND NOT has(projections, 'ends_daily_bots')",
                {"d": db},
            )
            return int(rows[0][0])

        # The parts written before the upgrade: one per month the sessions fall in (two in the
        # first days of a month).
        written_before = lacking()
        assert written_before >= 1
        assert migrate(storage) == [m.name for m in load_migrations()[3:]]
        insert([r for n in range(6, 12) for r in session(n, 1500.0)], uuid.uuid4().hex)  # after

        sql = (
            f"SELECT sum(ends), sum(stated_ms), sumIf(toInt128(unstated_at_ms), session_hash != 0) "
            f"FROM {db}.sessions_daily WHERE project_id = 'pppppppppppppppppppppppp' "
            "SETTINGS optimize_use_projections = {p:UInt8}"
        )

        from_rows = storage.query(sql, {"p": 0})
        assert from_rows[0][:2] == (12, 6 * 1500.0)
        assert lacking() == written_before  # the parts written before the upgrade
        assert storage.query(sql, {"p": 1}) == from_rows
        storage.command(
            f"ALTER TABLE {db}.sessions_daily MATERIALIZE PROJECTION ends_daily_bots "
            "SETTINGS mutations_sync = 1"
        )
        assert lacking() == 0
        assert storage.query(sql, {"p": 1}) == from_rows
    finally:
        storage.close()


def test_upgrade_to_event_dimensions_keeps_old_rows_with_defaults(chdb_path):
    """Events written under schema 001-004 read after 005 with its defaults, and new rows can
    carry the dimension columns beside them."""
    storage = Storage(parse_url(f"chdb://{chdb_path}?database=d_{uuid.uuid4().hex[:10]}"), 1)
    db = storage.database
    try:
        migrate_before(storage, 5)
        storage.command(
            f"INSERT INTO {db}.events (project_id, name, occurred_at, received_at, url) "
            "VALUES ('p', 'pageview', now64(3), now64(3), 'https://a.example/?utm_source=x')"
        )
        assert "005_event_dimensions" in migrate(storage)
        storage.command(
            f"INSERT INTO {db}.events (project_id, name, occurred_at, received_at, source, "
            "channel, utm_source, country, is_bot) VALUES ('p', 'pageview', now64(3), now64(3), "
            "'Google', 'Organic Search', 'g', 'DE', 1)"
        )
        rows = storage.query(
            f"SELECT source, channel, utm_source, utm_medium, utm_campaign, utm_content, "
            f"utm_term, country, is_bot FROM {db}.events ORDER BY is_bot"
        )
        assert rows == [
            ("", "", "", "", "", "", "", "", 0),
            ("Google", "Organic Search", "g", "", "", "", "", "DE", 1),
        ]
    finally:
        storage.close()


def test_upgrade_to_the_corrected_comments_keeps_every_row(chdb_path):
    """Schemas 016, 017 and 018 change column comments only: data written under 015 reads the same
    after them, and analysts read the new comments in system.columns."""
    storage = Storage(parse_url(f"chdb://{chdb_path}?database=d_{uuid.uuid4().hex[:10]}"), 1)
    db = storage.database
    try:
        migrate_before(storage, 16)
        storage.command(
            f"INSERT INTO {db}.events (project_id, name, occurred_at, received_at, session_id, "
            "duration_ms) VALUES ('p', 'session_end', now64(3), now64(3), 's', 1500), "
            "('p', 'session_end', now64(3), now64(3), 't', NULL), "
            "('p', 'pageview', now64(3), now64(3), '', NULL)"
        )
        tables = ("events", "sessions_daily", "sessions_quarter")
        read = (
            f"SELECT count(), sum(ends_stated) FROM {db}.sessions_daily",
            f"SELECT count(), sum(length(ends_stated)), sum(length(ends_unstated)) "
            f"FROM {db}.sessions_quarter",
            f"SELECT count(), uniqExact(event_id), sum(duration_ms) FROM {db}.events",
        )
        before = [storage.query(sql) for sql in read]
        assert before[0] == [(3, 1)] and before[1] == [(3, 1, 1)]

        assert migrate(storage) == [
            "016_column_comments",
            "017_event_id_comment",
            "018_event_id_hash_comments",
            "019_exact_durations",
            "020_event_visitors",
        ]

        assert [storage.query(sql) for sql in read] == before
        comments = dict(
            storage.query(
                "SELECT concat(table, '.', name), comment FROM system.columns "
                "WHERE database = {d:String} AND table IN {t:Array(String)} "
                "AND name IN ('event_id', 'session_key', 'ends_stated', 'ends_unstated')",
                {"d": db, "t": list(tables)},
            )
        )
        # schema 017: the id is given by Tally when it accepts the event
        assert "given by Tally when it accepts the event" in comments["events.event_id"]
        for column in ("sessions_daily.ends_stated", "sessions_quarter.ends_stated"):
            assert "a number >= 0" in comments[column], column
        assert "number >= 0 (events.duration_ms NULL)" in comments["sessions_quarter.ends_unstated"]
        # schema 018: the hash of an event's id is of its text, and the stored keys say so
        hashed = "sipHash64(toString(event_id))"
        for column in (
            "events.session_key",
            "sessions_quarter.session_key",
            "sessions_quarter.ends_stated",
            "sessions_quarter.ends_unstated",
        ):
            assert hashed in comments[column], column
        keys = storage.query(
            f"SELECT countIf(session_key = sipHash64(toString(event_id))), "
            f"countIf(session_key = sipHash64(event_id)) FROM {db}.events WHERE session_id = ''"
        )
        assert keys == [(1, 0)]
    finally:
        storage.close()


def test_upgrade_to_project_settings_reads_old_projects_with_the_defaults(chdb_path):
    """Projects written under schema 001-005 read after 006 as UTC, bots left out, not deleted;
    they can be changed and deleted like new ones."""
    from tally.domain.ids import next_version, object_id, utcnow
    from tally.domain.projects import ProjectSettings
    from tally.storage.projects import ProjectStore

    storage = Storage(parse_url(f"chdb://{chdb_path}?database=s_{uuid.uuid4().hex[:10]}"), 1)
    db = storage.database
    try:
        migrate_before(storage, 6)
        old, other = object_id(), object_id()
        storage.insert(  # as schema 003 wrote projects
            f"{db}.projects",
            [[old, other], ["u", "u"], ["Old", "Other"], [utcnow()] * 2, [next_version()] * 2],
            ["id", "owner_id", "name", "created_at", "version"],
        )
        assert "006_project_settings" in migrate(storage)
        store = ProjectStore(storage)
        projects = store.list_projects("u")
        assert sorted((p.id, p.name, p.timezone, p.exclude_bots) for p in projects) == sorted(
            [(old, "Old", "UTC", True), (other, "Other", "UTC", True)]
        )
        assert store.owned_settings("u", old) == ProjectSettings("UTC", True)
        assert store.update_project("u", old, timezone="Asia/Kolkata").timezone == "Asia/Kolkata"
        store.mark_deleted("u", store.get_project("u", other))
        assert [(p.id, p.timezone) for p in store.list_projects("u")] == [(old, "Asia/Kolkata")]
        assert not store.owns("u", other)
    finally:
        storage.close()


def test_project_deletion_in_cluster_mode_mutates_the_local_tables():
    """The rows live in the _local tables: that is where the DELETE mutations go, ON CLUSTER."""
    from tally.storage.purge import delete_statements

    assert delete_statements("tally", ["events_local", "sessions_daily_local"], "c") == [
        "ALTER TABLE tally.events_local ON CLUSTER c DELETE WHERE project_id = {project:String} "
        "SETTINGS mutations_sync = 2",
        "ALTER TABLE tally.sessions_daily_local ON CLUSTER c DELETE WHERE "
        "project_id = {project:String} SETTINGS mutations_sync = 2",
    ]
    assert delete_statements("tally", ["events"]) == [
        "ALTER TABLE tally.events DELETE WHERE project_id = {project:String} "
        "SETTINGS mutations_sync = 2"
    ]


def test_project_tables_in_cluster_mode_are_the_local_ones(chdb_path, tmp_path):
    """Found on a database laid out as cluster mode lays it out (local tables, Distributed
    ones by the public names): only the local tables, api_keys left out."""
    from storage_modes import for_one_embedded_node
    from tally.storage.purge import project_tables

    storage = Storage(parse_url(f"chdb://{chdb_path}?database=c_{uuid.uuid4().hex[:10]}"), 1)
    try:
        for migration in load_migrations():
            for statement in migration.statements(storage.database, "c"):
                table = statement.split(" ON CLUSTER ", 1)[0].split(".")[-1]
                if "Distributed(" in statement or not table.endswith("_local"):
                    continue  # the Distributed tables need the cluster defined; not needed here
                storage.command(for_one_embedded_node(statement, "c"))
        storage.cluster = "c"
        found = project_tables(storage)
        assert "events_local" in found and "sessions_daily_local" in found
        assert all(t.endswith("_local") for t in found)
        assert "api_keys_local" not in found
    finally:
        storage.close()


def test_a_backfill_stopped_part_way_is_done_again_whole(chdb_path):
    """Schema 007's events_quarter backfill commits one part per month. A kill of `tally migrate`
    after the first of them left the table with that month only; the run after saw a table that
    was not empty, skipped the backfill and recorded 007, and the 15-minute rollup missed the
    other months for good (measured with a kill at the part's rename). The state such a kill
    leaves is made here by running 007 up to that backfill, for its first month only."""
    from tally.storage.migrate import _GUARDED

    target = parse_url(f"chdb://{chdb_path}?database=h_{uuid.uuid4().hex[:10]}")
    storage = Storage(target, pool_size=1)
    db = storage.database
    try:
        migrate_before(storage, 7)
        storage.command(
            f"INSERT INTO {db}.events (project_id, name, occurred_at, received_at, session_id, "
            "visitor_id) SELECT repeat('f', 24), if(number % 3 = 0, 'signup', 'pageview'), "
            "toDateTime64('2024-05-01 00:00:00', 3, 'UTC') + number * 2000 AS at, at, "
            "concat('s', toString(number % 50)), concat('v', toString(number % 30)) "
            "FROM numbers(3600)"
        )
        [schema_007] = [m for m in load_migrations() if m.version == 7]
        for statement in schema_007.statements(db):
            if _GUARDED.match(statement.strip()):
                first_month = statement.replace(
                    "\nGROUP BY", "\n  AND toYYYYMM(occurred_at) = 202405\nGROUP BY", 1
                )
                assert first_month != statement
                storage.command(first_month)
                break
            storage.command(statement)
        assert 0 < storage.query(f"SELECT sum(events) FROM {db}.events_quarter")[0][0] < 3600

        assert "007_local_time_and_bots" in migrate(storage)
        wrong = storage.query(
            f"SELECT count() FROM (SELECT project_id, toStartOfFifteenMinutes(occurred_at) AS "
            f"bucket, name, is_bot, count() AS n FROM {db}.events GROUP BY ALL) AS e "
            f"FULL OUTER JOIN (SELECT project_id, bucket, name, is_bot, sum(events) AS n "
            f"FROM {db}.events_quarter GROUP BY ALL) AS q USING (project_id, bucket, name, is_bot) "
            "WHERE e.n != q.n SETTINGS join_use_nulls = 0"
        )[0][0]
        assert wrong == 0
        for table, want in [
            ("events_quarter", "count()"),
            ("visitors_quarter", "countIf(visitor_id != '')"),
            ("sessions_quarter", "count()"),
            ("audience_quarter", "count()"),
        ]:
            held = storage.query(f"SELECT sum(events) FROM {db}.{table}")[0][0]
            assert held == storage.query(f"SELECT {want} FROM {db}.events")[0][0], table
    finally:
        storage.close()

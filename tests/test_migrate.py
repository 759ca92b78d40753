"""Schema migrations: ordered, recorded, and idempotent on a fresh database."""

from __future__ import annotations

import uuid

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

        assert all("toIntervalDay(30)" in engines()[t] for t in RETENTION_COLUMNS)
        now = datetime.now(UTC)
        old, recent = (int((now - timedelta(days=d)).timestamp()) for d in (40, 2))
        rows = [
            ("p" * 24, "pageview", t, t, "/", "", "", "s", "v", "", "", "", None, "{}", "", "", "k")
            for t in (old, recent)
        ]
        events_inserter(storage)(rows, uuid.uuid4().hex)
        for table in RETENTION_COLUMNS:
            storage.command(f"OPTIMIZE TABLE {storage.database}.{table} FINAL")
        assert storage.query(f"SELECT count() FROM {storage.database}.events")[0][0] == 1
        assert storage.query(f"SELECT sum(events) FROM {storage.database}.events_daily")[0][0] == 1

        migrate(storage, retention_days=90)  # changed later
        assert all("toIntervalDay(90)" in engines()[t] for t in RETENTION_COLUMNS)
        migrate(storage, retention_days=0)  # back to keeping everything
        assert all(" TTL " not in engines()[t] for t in RETENTION_COLUMNS)
    finally:
        storage.close()

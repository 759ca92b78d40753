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

"""Profiles behind benchmarks/README.md's "why the missed targets are missed": what one INSERT
costs and where it goes, and what each dashboard query costs alone.

    python -m benchmarks.profile insert [--rows 16,250] [--repeat 30]
    python -m benchmarks.profile queries [--events 10000000] [--repeat 15] [--threads 1]

``insert`` opens a fresh embedded engine, times the loader's own INSERT (``segment_inserter`` with
the loader's settings: on the embedded engine ``EMBEDDED_INSERT_SETTINGS``, one thread and the
views one after another; through the events table and its materialized views) at each batch
size, then with deduplication off and with the views run side by side
(``parallel_view_processing``, as on a ClickHouse server), then without the rollups'
projections, then drops the views one at a time and times it again after each. ``queries``
loads two tenants of ``--events`` each with the generator, waits for the merges, and times each
of the service's dashboard queries alone for 7, 30 and 90 days (``--threads`` sets
``max_threads``; 1 shows the CPU a query costs), then the whole dashboard as served, with the CPU
it used, each after 4 untimed runs. Both print medians in milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

from tally.storage.client import Storage, parse_url
from tally.storage.migrate import migrate

from .common import loader_insert

# Runs of each query discarded before timing: a fresh engine's first queries are markedly slower
# (the sessions query at 10M events: ~150 ms over its first runs, ~105 ms after), and the
# dashboard is timed warm.
WARM_UP = 4


def _median_ms(fn: Callable[[], Any], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(samples), 1)


def rows_insert(storage: Storage) -> Callable[[list[tuple[Any, ...]], str], None]:
    """Rows in the order of ``EVENT_COLUMNS`` stored by the loader's own INSERT, settings
    included (common.loader_insert): what the profile times."""
    import msgspec

    from tally.storage.writer import EVENT_COLUMNS

    load, encode = loader_insert(storage), msgspec.json.Encoder().encode_lines

    def insert(rows: list[tuple[Any, ...]], token: str) -> None:
        load(EVENT_COLUMNS, encode(rows), token)

    return insert


def profile_insert(rows: list[int], repeat: int) -> list[tuple[str, int, float]]:
    """(case, rows per INSERT, median ms) for every case described in the module docstring."""
    from tally.storage import writer

    out: list[tuple[str, int, float]] = []
    with tempfile.TemporaryDirectory(prefix="tally-profile-") as tmp:
        storage = Storage(parse_url(f"chdb://{tmp}/clickhouse"), pool_size=1)
        try:
            migrate(storage)
            insert = rows_insert(storage)
            now = time.time()
            row = ("p" * 24, "pageview", now, now, "/", "", "", "", "v", "Chrome", "Linux")
            row += ("desktop", None, "{}", "127.0.0.1", "ua", "k")
            row += ("Direct / None", "Direct", "", "", "", "", "", "Unknown", 0)

            def batch(n: int) -> Callable[[], None]:
                def run() -> None:  # one new session per row, as from n browsers
                    rows = [(*row[:7], uuid.uuid4().hex, *row[8:]) for _ in range(n)]
                    insert(rows, uuid.uuid4().hex)

                return run

            def case(name: str, **settings: Any) -> None:
                # Over the loader's settings: the embedded engine's override INSERT_SETTINGS.
                tables = (writer.INSERT_SETTINGS, writer.EMBEDDED_INSERT_SETTINGS)
                saved = [dict(table) for table in tables]
                for table in tables:
                    table.update(settings)
                try:
                    for n in rows:
                        out.append((name, n, _median_ms(batch(n), repeat)))
                finally:
                    for table, before in zip(tables, saved, strict=True):
                        table.clear()
                        table.update(before)

            views = [
                name
                for (name,) in storage.query(
                    "SELECT name FROM system.tables WHERE database = {db:String} "
                    "AND engine = 'MaterializedView' ORDER BY name",
                    {"db": storage.database},
                )
            ]
            for _ in range(10):  # warm-up, not counted: the first parts of new tables cost more
                batch(rows[0])()
            case(f"{len(views)} views")
            case(
                f"{len(views)} views, no deduplication",
                insert_deduplicate=0,
                deduplicate_blocks_in_dependent_materialized_views=0,
            )
            case(f"{len(views)} views, side by side", parallel_view_processing=1)
            projections = storage.query(
                "SELECT table, name FROM system.projections WHERE database = {db:String}",
                {"db": storage.database},
            )
            for table, name in projections:
                storage.command(f"ALTER TABLE {storage.database}.{table} DROP PROJECTION {name}")
            if projections:
                case(f"{len(views)} views, no projections")
            for left in range(len(views) - 1, -1, -1):
                storage.command(f"DROP VIEW {storage.database}.{views[left]}")
                case(f"{left} views")
        finally:
            storage.close()
    return out


def profile_queries(
    events: int, repeat: int, threads: int
) -> list[tuple[int, str, float, float | None]]:
    """(days, name, median wall ms, median CPU ms or None) of each dashboard query alone, then of
    the whole dashboard as served (every query at once, default settings), on two tenants of
    ``events``. The CPU is the process's, all engine threads included."""
    import asyncio

    from tally.query import Query
    from tally.query.sql import dashboard_sql, parameters
    from tally.storage import dashboard
    from tally.storage.projects import ProjectStore

    from .generate import generate, settle_merges

    out: list[tuple[int, str, float, float | None]] = []
    with tempfile.TemporaryDirectory(prefix="tally-profile-") as tmp:
        pool = 16  # every dashboard query at once
        storage = Storage(parse_url(f"chdb://{tmp}/clickhouse"), pool_size=pool)
        try:
            migrate(storage)
            store = ProjectStore(storage)
            tenant, _, _ = store.create_project("profile", "tenant")
            neighbour, _, _ = store.create_project("profile-neighbour", "neighbour")
            generate(storage, tenant.id, events, seed=1)
            generate(storage, neighbour.id, events, seed=2)
            settle_merges(storage)
            settings = {"max_threads": threads} if threads else {}
            for days in (7, 30, 90):
                window = Query(tenant.id, days, datetime.now(UTC))
                params = parameters(window)
                with storage.client() as client:
                    for name, sql in dashboard_sql(window).items():
                        run = partial(
                            client.query,
                            sql.replace("{db}", storage.database),
                            parameters=params,
                            settings=settings,
                        )
                        for _ in range(WARM_UP):
                            run()
                        out.append((days, name, _median_ms(run, repeat), None))
                walls, cpus = [], []
                for _ in range(WARM_UP + repeat):
                    wall, cpu = time.perf_counter(), time.process_time()
                    asyncio.run(dashboard.fetch(storage, window))
                    walls.append((time.perf_counter() - wall) * 1000)
                    cpus.append((time.process_time() - cpu) * 1000)
                out.append(
                    (
                        days,
                        "dashboard",
                        round(statistics.median(walls[WARM_UP:]), 1),
                        round(statistics.median(cpus[WARM_UP:]), 1),
                    )
                )
        finally:
            storage.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__)
    sub = parser.add_subparsers(dest="what", required=True)
    insert = sub.add_parser("insert", help="what one INSERT costs, views and settings apart")
    insert.add_argument("--rows", default="16,250", help="rows per INSERT, comma-separated")
    insert.add_argument("--repeat", type=int, default=30)
    queries = sub.add_parser("queries", help="each dashboard query alone")
    queries.add_argument("--events", type=int, default=10_000_000, help="events per tenant")
    queries.add_argument("--repeat", type=int, default=15)
    queries.add_argument("--threads", type=int, default=0, help="max_threads (0: the default)")
    args = parser.parse_args(argv)
    if args.what == "insert":
        for name, n, ms in profile_insert([int(n) for n in args.rows.split(",")], args.repeat):
            print(f"{name:<34} {n:>6} rows {ms:>8} ms")
    else:
        for days, name, ms, cpu in profile_queries(args.events, args.repeat, args.threads):
            line = f"{days:>2} days  {name:<12} {ms:>8} ms"
            print(line if cpu is None else f"{line}, {cpu} ms of CPU (all queries at once)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

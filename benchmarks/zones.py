"""Dashboard cost by time zone and bot rule, on one loaded tenant, all designs in the same run.

The machine may be noisy: compare the figures of one run with each other (ratios), not with
another run's. Usage::

    python -m benchmarks.zones --url chdb:///tmp/data/clickhouse --project ID [--repeat 15]

With ``--events N`` (and no ``--project``) it first loads a tenant of N events and a neighbour
of N/5 into a fresh engine at ``--url``. It times, warm, per zone: the whole dashboard as
served (every query at once) and each query alone, median and p95 in ms, plus the same
dashboard's queries over the raw ``events`` table for the UTC window as the floor to beat.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from tally.query import Query
from tally.query.sql import dashboard_sql, parameters
from tally.storage import dashboard
from tally.storage.client import Storage, parse_url
from tally.storage.migrate import migrate

ZONES = ("UTC", "Asia/Kathmandu", "America/Los_Angeles", "Pacific/Chatham")
WARM_UP = 3


def _times(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    for _ in range(WARM_UP):
        fn()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    p95 = samples[min(len(samples) - 1, round(0.95 * (len(samples) - 1)))]
    return round(statistics.median(samples), 1), round(p95, 1)


def measure(storage: Storage, project: str, days: int, repeat: int) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    now = datetime.now(UTC)
    for zone in ZONES:
        for exclude in (True, False):
            query = Query(project, days, now, tz=zone, exclude_bots=exclude)
            whole = _times(lambda q=query: asyncio.run(dashboard.fetch(storage, q)), repeat)
            label = f"{zone} bots {'out' if exclude else 'in'}"
            out.append((label, "dashboard", *map(str, whole)))
            if not exclude:
                continue
            params = parameters(query)
            for name, sql in dashboard_sql(query).items():
                sql = sql.replace("{db}", storage.database)
                alone = _times(lambda s=sql, v=params: storage.query(s, v), repeat)
                out.append((label, name, *map(str, alone)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.zones", description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--project", default="")
    parser.add_argument("--events", type=int, default=0)
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)
    storage = Storage(parse_url(args.url), pool_size=16)
    try:
        started = time.perf_counter()
        migrate(storage)
        print(f"migrate: {time.perf_counter() - started:.1f} s")
        project = args.project
        if not project:
            from tally.storage.projects import ProjectStore

            from .generate import generate, settle_merges

            store = ProjectStore(storage)
            project = store.create_project("zones", "tenant")[0].id
            neighbour = store.create_project("zones", "neighbour")[0].id
            generate(storage, project, args.events, seed=1)
            generate(storage, neighbour, max(1, args.events // 5), seed=2)
            settle_merges(storage)
        print(f"{'window':28} {'query':18} {'median':>8} {'p95':>8}")
        for label, name, median, p95 in measure(storage, project, args.days, args.repeat):
            print(f"{label:28} {name:18} {median:>8} {p95:>8}")
    finally:
        storage.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""One-off timing of the storage-level queries issues 16 and 17 target, on the tenant that
scripts/speed_load.py loaded (not part of the package; the benchmark suite is benchmarks/).
Medians (and max) of N warm runs each, in ms. The machine is shared: a noisy one-off.

Usage: PYTHONPATH=. python scripts/speed_time.py .bench-data/chdb [N] [only-prefix...]"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from benchmarks.generate import settle_merges
from benchmarks.queries import FILTERED_BY

from tally.domain.filters import parse_filters
from tally.domain.ranges import parse_compare
from tally.http.compare import earlier_query
from tally.http.views import build_dashboard
from tally.query import Query, names
from tally.query.breakdown import DIMENSIONS, breakdown_parameters, raw_breakdown_sql
from tally.storage import dashboard
from tally.storage.breakdown import fetch_breakdown
from tally.storage.client import Storage, parse_url
from tally.storage.migrate import migrate

# The benchmark's filters (benchmarks/queries.py): the most visited value of each dimension in
# the window of scripts/speed_load.py's tenant.
FILTERS = {
    "path": '[["is","path",["/page/1"]]]',
    "country": '[["is","country",["US"]]]',
    "source": '[["is","source",["Google"]]]',
    "browser": '[["is","browser",["Chrome"]]]',
}


def main() -> None:
    folder = Path(sys.argv[1]).resolve()
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    only = sys.argv[3:]
    storage = Storage(parse_url(f"chdb://{folder}"), pool_size=16)
    t = time.perf_counter()
    applied = migrate(storage)
    print(json.dumps({"migrated": applied, "seconds": round(time.perf_counter() - t, 1)}))
    if "011_session_visitor_list" in applied:
        # The operator's one-off step after schema 011 (docs/operations.md), as for 009 below.
        storage.command(
            f"ALTER TABLE {storage.database}.sessions_quarter MATERIALIZE COLUMN visitor_list "
            "SETTINGS mutations_sync = 2"
        )
    done = folder.parent / "materialized.txt"
    if "009_event_keys" in applied or not done.exists():
        # The operator's one-off step after schema 009 (docs/operations.md): write the keys of
        # the parts stored before it, so that the timings measure what a new install has.
        t = time.perf_counter()
        for column in ("session_key", "visitor_hash"):
            storage.command(
                f"ALTER TABLE {storage.database}.events MATERIALIZE COLUMN {column} "
                "SETTINGS mutations_sync = 2"
            )
        print(json.dumps({"materialized": round(time.perf_counter() - t, 1)}))
        print(json.dumps({"settled": round(settle_merges(storage), 1)}), flush=True)
        done.write_text("yes")
    project = (folder.parent / "project.txt").read_text().strip()
    now = datetime.now(UTC)
    compare = parse_compare("previous_period")

    def q(**kw) -> Query:
        kw.setdefault("days", 90)
        return Query(project, now=now, **kw)

    async def dash(query: Query):
        return build_dashboard(await dashboard.fetch(storage, query), query)

    async def dash_compare(query: Query):
        await dash(query)
        other = earlier_query(query, compare)
        fetch = getattr(dashboard, "fetch_summary", dashboard.fetch)  # as the controller
        return build_dashboard(await fetch(storage, other), other)

    cases: dict[str, object] = {
        "dash_utc": lambda: dash(q()),
        "dash_ktm": lambda: dash(q(tz="Asia/Kathmandu")),
        "dash_utc_compare": lambda: dash_compare(q()),
        "dash_366": lambda: dash(
            q(days=366, first=now.date() - timedelta(days=365), last=now.date())
        ),
    }
    for by in DIMENSIONS:
        cases[f"bd_{by}"] = lambda by=by: fetch_breakdown(storage, q(dimension=by))
    # The breakdown by event from event_visitors (schema 020) and from the raw table, whatever
    # the decider would choose: where query/decider.py's EVENT_ROLLUP_DAYS comes from.
    for days in (7, 14, 30, 90):
        for kind, sql_of in (("rollup", names.breakdown_sql), ("raw", raw_breakdown_sql)):
            query = q(dimension="event", days=days)
            sql = sql_of(query).replace("{db}", storage.database)
            cases[f"ev_{kind}_{days}d"] = lambda sql=sql, query=query: storage.report(
                sql, breakdown_parameters(query)
            )
    for dim, raw in FILTERS.items():
        f = parse_filters(raw)
        cases[f"fdash_{dim}"] = lambda f=f: dash(q(filters=f))
        cases[f"fdash_{dim}_compare"] = lambda f=f: dash_compare(q(filters=f))
        for by in sorted({"path", "source", FILTERED_BY[dim]}):
            cases[f"fbd_{dim}_by_{by}"] = lambda f=f, by=by: fetch_breakdown(
                storage, q(filters=f, dimension=by)
            )

    async def run() -> None:
        for name, make in cases.items():
            if only and not any(name.startswith(o) for o in only):
                continue
            await make()  # warm
            samples = []
            for _ in range(n):
                started = time.perf_counter()
                await make()
                samples.append((time.perf_counter() - started) * 1000)
            print(
                f"{name:32s} median {statistics.median(samples):8.0f} ms"
                f"   max {max(samples):8.0f} ms",
                flush=True,
            )

    try:
        asyncio.run(run())
    finally:
        storage.close()


if __name__ == "__main__":
    main()

"""How fast does a 90-day dashboard open for a big tenant, and what do the rollups buy?

For each tenant size, a worker process (the embedded engine allows one process per data folder)
loads two tenants of that size into the same tables, waits for the background merges the load
started to finish (a real tenant's tables are merged as its events arrive; timing during that
burst would measure the merges), then times, warm and repeatedly:

- ``rollup``: the service's own dashboard queries (``tally.storage.dashboard``), in process;
- ``raw``: the same answers by straightforward SQL over the raw ``events`` table only.

It also checks that both give the same dashboard, to the number. Then a real ``tally serve`` on
that data answers ``GET /api/dashboard`` over loopback, and its latency is what the targets judge.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from . import queries
from .common import bench_url, drop_bench_database, percentile, serve

WINDOWS = (7, 30, 90)
T0 = "{t0:DateTime64(3, 'UTC')}"
# The project leaves bots out (the default): so do the raw answers; ``bots`` counts them.
WINDOW = f"project_id = {{p:String}} AND occurred_at >= {T0}"
RAW_WHERE = f"{WINDOW} AND is_bot = 0"
RAW_QUERIES: dict[str, str] = {
    "timeline": f"""SELECT toDate(occurred_at) AS day, count(), countIf(name = 'pageview')
        FROM {{db}}.events WHERE {RAW_WHERE} GROUP BY day""",
    "names": f"""SELECT name, count() AS c FROM {{db}}.events WHERE {RAW_WHERE}
        GROUP BY name ORDER BY c DESC, name LIMIT 10""",
    "hours": f"""SELECT toHour(occurred_at) AS h, count() FROM {{db}}.events WHERE {RAW_WHERE}
        GROUP BY h""",
    "paths": f"""SELECT path, count() AS c FROM {{db}}.events
        WHERE {RAW_WHERE} AND name = 'pageview' AND path != ''
        GROUP BY path ORDER BY c DESC, path LIMIT 10""",
    "referrers": f"""SELECT referrer, count() AS c FROM {{db}}.events
        WHERE {RAW_WHERE} AND name = 'pageview' AND referrer != ''
        GROUP BY referrer ORDER BY c DESC, referrer LIMIT 10""",
    "browsers": f"""SELECT browser, count() AS c FROM {{db}}.events WHERE {RAW_WHERE}
        GROUP BY browser ORDER BY c DESC, browser LIMIT 10""",
    "devices": f"""SELECT device_type, count() AS c FROM {{db}}.events WHERE {RAW_WHERE}
        GROUP BY device_type ORDER BY c DESC, device_type LIMIT 10""",
    "visitors": f"""SELECT uniqExact(visitor_id) FROM {{db}}.events
        WHERE {RAW_WHERE} AND visitor_id != ''""",
    "day_visitors": f"""SELECT toDate(occurred_at) AS day, uniqExact(visitor_id) FROM {{db}}.events
        WHERE {RAW_WHERE} AND visitor_id != '' GROUP BY day""",
    "sessions": f"""SELECT countIf(sid != ''), countIf(sid != '' AND pv >= 1),
            countIf(sid != '' AND pv = 1), sum(ends),
            sumMap(stated), sumIf(unstated_at - toInt64(ends - ends_stated) * first_ms, sid != '')
        FROM (SELECT session_id AS sid, countIf(name = 'pageview') AS pv,
                     min(toUnixTimestamp64Milli(occurred_at)) AS first_ms,
                     countIf(name = 'session_end') AS ends,
                     countIf(name = 'session_end' AND duration_ms IS NOT NULL) AS ends_stated,
                     sumMapIf([duration_exponent], [toUInt128(duration_digits)],
                              name = 'session_end' AND duration_ms IS NOT NULL) AS stated,
                     sumIf(toUnixTimestamp64Milli(occurred_at),
                           name = 'session_end' AND duration_ms IS NULL) AS unstated_at
              FROM {{db}}.events WHERE {RAW_WHERE} GROUP BY session_id)""",
    "bots": f"SELECT count() FROM {{db}}.events WHERE {WINDOW} AND is_bot = 1",
}


# --- worker: runs in its own process, owns the embedded engine -------------------------------
def _worker(url: str, events: int, repeat: int, with_queries: bool = False) -> dict[str, Any]:
    from datetime import UTC, datetime

    from tally.domain.metrics import stated_total
    from tally.http.views import build_dashboard
    from tally.query import Query as Window
    from tally.query.sql import dashboard_sql, parameters
    from tally.storage import dashboard as service_queries
    from tally.storage.client import Storage, parse_url
    from tally.storage.migrate import migrate
    from tally.storage.projects import ProjectStore

    from .generate import generate, settle_merges

    storage = Storage(parse_url(url), pool_size=16)  # every dashboard query at once
    migrate(storage)
    store = ProjectStore(storage)
    tenant, _, _ = store.create_project("bench", f"tenant {events}")
    neighbour, _, _ = store.create_project("bench-neighbour", f"neighbour {events}")
    load_seconds = generate(storage, tenant.id, events, seed=1)
    load_seconds += generate(storage, neighbour.id, events, seed=2)
    settle_seconds = settle_merges(storage)

    # recentEvents and liveVisitors read the raw table in the service too: same SQL both ways.
    raw_sql = {
        name: sql.replace("{db}", storage.database)
        for name, sql in {
            **RAW_QUERIES,
            "recent": dashboard_sql(Window(tenant.id, 1, datetime.now(UTC)))["recent"],
            "live": dashboard_sql(Window(tenant.id, 1, datetime.now(UTC)))["live"],
        }.items()
    }

    async def rollup(window: Window) -> Any:
        return build_dashboard(await service_queries.fetch(storage, window), window)

    async def raw(window: Window) -> Any:
        params = parameters(window)
        rows: dict[str, Any] = dict(
            zip(
                raw_sql,
                await asyncio.gather(*(storage.report(sql, params) for sql in raw_sql.values())),
                strict=True,
            )
        )
        rows["day_visitors"] = dict(rows["day_visitors"])
        rows["bots"] = int(rows["bots"][0][0])
        # The stated durations as their decimals, exactly (schema 019), plus the time spans.
        *counts, stated, spans = rows["sessions"][0]
        rows["sessions"] = [(*counts, stated_total(zip(*stated, strict=True)) + int(spans))]
        return build_dashboard(service_queries.DashboardRows(**rows), window)

    async def timed(fn: Any, window: Window) -> list[float]:
        await fn(window)  # warm
        samples = []
        for _ in range(repeat):
            started = time.perf_counter()
            await fn(window)
            samples.append((time.perf_counter() - started) * 1000)
        return samples

    async def run() -> dict[str, Any]:
        out: dict[str, Any] = {
            "tenant": tenant.id,
            "load_seconds": round(load_seconds, 1),
            "merge_settle_seconds": round(settle_seconds, 1),
        }
        if with_queries:  # the answers the served breakdowns and filtered views must equal
            out["queries_reference"] = queries.reference(storage, tenant.id, datetime.now(UTC))
            out["disk"] = queries.disk(storage)
        for days in WINDOWS:
            window = Window(tenant.id, days, datetime.now(UTC))
            a, b = await rollup(window), await raw(window)
            a.recent_events = b.recent_events = []  # same rows; ties may order differently
            a.live_visitors = b.live_visitors = 0
            fast, slow = await timed(rollup, window), await timed(raw, window)
            out[f"{days}d"] = {
                "rollup_p50_ms": percentile(fast, 50),
                "rollup_p95_ms": percentile(fast, 95),
                "raw_p50_ms": percentile(slow, 50),
                "raw_p95_ms": percentile(slow, 95),
                "exact": a == b,
            }
        return out

    try:
        return asyncio.run(run())
    finally:
        storage.close()


# --- orchestration ----------------------------------------------------------------------------
def run_size(
    events: int,
    repeat: int,
    http_repeat: int,
    workdir: Path,
    clickhouse_url: str = "",
    workers: int = 1,
    with_queries: bool = False,
    queries_repeat: int = 0,
) -> dict[str, Any]:
    with_queries = with_queries and events <= queries.MAX_EVENTS
    data = workdir / f"tenant-{events}"
    data.mkdir(parents=True, exist_ok=True)
    url = bench_url(clickhouse_url, f"dashboard_{size_label(events).lower()}", data)
    drop_bench_database(url)
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.dashboard", "--worker", url, str(events), str(repeat)]
        + (["--queries"] if with_queries else []),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"dashboard worker failed: {done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    with (
        serve(data, url, workers) as server,
        httpx.Client(base_url=server.url, timeout=60) as client,
    ):
        headers = server.headers("bench")
        for days in WINDOWS:
            query = {"projectId": result["tenant"], "days": days}
            client.get("/api/dashboard", params=query, headers=headers).raise_for_status()
            samples = []
            for _ in range(http_repeat):
                started = time.perf_counter()
                response = client.get("/api/dashboard", params=query, headers=headers)
                samples.append((time.perf_counter() - started) * 1000)
                response.raise_for_status()
            row = result[f"{days}d"]
            row["p50_ms"] = round(percentile(samples, 50), 2)
            row["p95_ms"] = round(percentile(samples, 95), 2)
            row["raw_over_rollup"] = round(row["raw_p95_ms"] / row["rollup_p95_ms"], 2)
            for key in ("rollup_p50_ms", "rollup_p95_ms", "raw_p50_ms", "raw_p95_ms"):
                row[key] = round(row[key], 2)
        if with_queries:
            reference = result.pop("queries_reference")
            result["queries"] = queries.measure(
                client,
                headers,
                result["tenant"],
                reference,
                queries_repeat or http_repeat,
                workers=workers,
            )
    return result


def run(
    sizes: list[int],
    repeat: int,
    http_repeat: int,
    workdir: Path | None = None,
    clickhouse_url: str = "",
    workers: int = 1,
    with_queries: bool = False,
    queries_repeat: int = 0,
) -> dict[str, Any]:
    """Dashboard results keyed by a readable size (``1M``) and window (``90d``); the data lives in
    a fresh embedded engine per size, or with ``clickhouse_url`` on that server."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="tally-bench-") as tmp:
        base = workdir or Path(tmp)
        for events in sizes:
            out[size_label(events)] = run_size(
                events,
                repeat,
                http_repeat,
                base,
                clickhouse_url,
                workers,
                with_queries,
                queries_repeat,
            )
    add_growth(out, [size_label(n) for n in sorted(sizes)])
    return out


def add_growth(out: dict[str, Any], labels: list[str]) -> None:
    """``p95_growth_from_<smallest>`` on every larger size: its HTTP p95 over the smallest's, per
    window. ``labels`` are the sizes, smallest first."""
    first, *larger = labels
    for label in larger:
        for days in WINDOWS:
            row, base = out[label][f"{days}d"], out[first][f"{days}d"]
            row[f"p95_growth_from_{first}"] = round(row["p95_ms"] / base["p95_ms"], 2)


def size_label(events: int) -> str:
    for unit, scale in (("M", 1_000_000), ("k", 1_000)):
        if events >= scale and events % scale == 0:
            return f"{events // scale}{unit}"
    return str(events)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", nargs=3, metavar=("URL", "EVENTS", "REPEAT"))
    parser.add_argument("--queries", action="store_true", help="also the queries reference")
    args = parser.parse_args()
    if args.worker:
        url, events, repeat = args.worker
        print(json.dumps(_worker(url, int(events), int(repeat), args.queries), default=str))

"""One-off A/B timing of `events`' projections on the tenant scripts/speed_load.py loaded: the
same storage-level fetches with ClickHouse free to read a projection (A) and with
``optimize_use_projections = 0`` (B, the table alone, as before schemas 013 to 015), interleaved
run by run in one process so that the shared machine's noise falls on both alike. The answers of
A and B are compared too. Not part of the package.

Usage: PYTHONPATH=service:. python scripts/projection_ab.py .bench-data/chdb [N] [prefix...]
(the filter values are the benchmark suite's: benchmarks/queries.py). With ``--b-prefers NAME``
B reads projection NAME wherever it can (``preferred_optimize_projection_name``) instead of the
table: ``--b-prefers by_path`` times schema 014's projection against schema 013 alone."""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from tally.domain.filters import parse_filters
from tally.http.views import build_dashboard
from tally.query import Query
from tally.storage import dashboard
from tally.storage.breakdown import fetch_breakdown
from tally.storage.client import Storage, parse_url

FILTERS = {
    "path": '[["is","path",["/page/1"]]]',
    "country": '[["is","country",["US"]]]',
    "browser": '[["is","browser",["Chrome"]]]',
    "source": '[["is","source",["Google"]]]',
}


def main() -> None:
    args = sys.argv[1:]
    prefers = ""
    if "--b-prefers" in args:
        at = args.index("--b-prefers")
        prefers = args[at + 1]
        del args[at : at + 2]
    folder = Path(args[0]).resolve()
    n = int(args[1]) if len(args) > 1 else 5
    only = args[2:]
    with_projections = Storage(parse_url(f"chdb://{folder}"), pool_size=8)
    table_only = Storage(parse_url(f"chdb://{folder}"), pool_size=8)
    if prefers:
        table_only.set_setting("preferred_optimize_projection_name", prefers)
    else:
        table_only.set_setting("optimize_use_projections", "0")
    project = (folder.parent / "project.txt").read_text().strip()
    now = datetime.now(UTC)

    def q(**kw) -> Query:
        return Query(project, now=now, days=90, **kw)

    cases: dict[str, object] = {
        f"bd_{by}": lambda s, by=by: fetch_breakdown(s, q(dimension=by))
        for by in ("path", "referrer", "event")
    }
    for dim, raw in FILTERS.items():
        f = parse_filters(raw)

        async def dash(s, f=f):
            query = q(filters=f)
            return build_dashboard(await dashboard.fetch(s, query), query)

        cases[f"fdash_{dim}"] = dash
        for by in ("path", "source"):
            cases[f"fbd_{dim}_by_{by}"] = lambda s, f=f, by=by: fetch_breakdown(
                s, q(filters=f, dimension=by)
            )

    async def run() -> None:
        label = f"prefers {prefers}" if prefers else "table only"
        print(f"{'case':28s} {'projections':>12s} {label:>18s}   same answer")
        for name, make in cases.items():
            if only and not any(name.startswith(o) for o in only):
                continue
            a_answer, b_answer = await make(with_projections), await make(table_only)  # warm
            a, b = [], []
            for _ in range(n):
                for storage, samples in ((with_projections, a), (table_only, b)):
                    started = time.perf_counter()
                    await make(storage)
                    samples.append((time.perf_counter() - started) * 1000)
            print(
                f"{name:28s} {statistics.median(a):9.0f} ms {statistics.median(b):15.0f} ms"
                f"   {a_answer == b_answer}",
                flush=True,
            )

    try:
        asyncio.run(run())
    finally:
        with_projections.close()
        table_only.close()


if __name__ == "__main__":
    main()

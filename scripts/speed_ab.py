"""One-off A/B timing on the tenant scripts/speed_load.py loaded: main's query code (a copy of
the package at a commit, importable as ``tally_base``) against this branch's, interleaved run by
run in one process, so that the shared machine's noise falls on both alike. Only the
storage-level fetches are timed (the same calls the controllers make). Not part of the package.

Usage: git archive <main-commit> service | tar -x -C /tmp/b && cp -r /tmp/b/service/tally
/tmp/ab/tally_base; PYTHONPATH=.:/tmp/ab python scripts/speed_ab.py .bench-data/chdb 5 [prefix..]
(a prefix ending in ``$`` names one case exactly: ``'fdash_path$'`` leaves out its compare)."""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import tally_base.domain.filters as base_filters
import tally_base.query as base_query

# The suite's filters on the speed tenant and the breakdown it times under each, as
# scripts/speed_time.py times them (this script's folder is first on sys.path).
from benchmarks.queries import FILTERED_BY
from speed_time import FILTERS
from tally_base.domain import ranges as base_ranges
from tally_base.http import compare as base_compare
from tally_base.storage import breakdown as base_breakdown
from tally_base.storage import dashboard as base_dashboard

from tally.domain.filters import DIMENSIONS, parse_filters
from tally.domain.ranges import parse_compare
from tally.http import compare
from tally.query import Query
from tally.storage import breakdown, dashboard
from tally.storage.client import Storage, parse_url


def main() -> None:
    folder = Path(sys.argv[1]).resolve()
    n = int(sys.argv[2])
    only = sys.argv[3:]
    storage = Storage(parse_url(f"chdb://{folder}"), pool_size=16)
    project = (folder.parent / "project.txt").read_text().strip()
    now = datetime.now(UTC)
    year = {"days": 366, "first": now.date() - timedelta(days=365), "last": now.date()}

    def both(**kw):
        kw.setdefault("days", 90)
        new = Query(project, now=now, **{**kw, "filters": parse_filters(kw.get("filters"))})
        old = base_query.Query(
            project, now=now, **{**kw, "filters": base_filters.parse_filters(kw.get("filters"))}
        )
        return old, new

    async def old_compare(q):
        await base_dashboard.fetch(storage, q)
        other = base_compare.earlier_query(q, base_ranges.parse_compare("previous_period"))
        # as main's controller: the other range's summary and timeline only
        await getattr(base_dashboard, "fetch_summary", base_dashboard.fetch)(storage, other)

    async def new_compare(q):
        await dashboard.fetch(storage, q)
        await dashboard.fetch_summary(
            storage, compare.earlier_query(q, parse_compare("previous_period"))
        )

    cases = {}

    def dash(name, **kw):
        old, new = both(**kw)
        cases[name] = (
            lambda: base_dashboard.fetch(storage, old),
            lambda: dashboard.fetch(storage, new),
        )
        cases[name + "_compare"] = (lambda: old_compare(old), lambda: new_compare(new))

    dash("dash_utc")
    dash("dash_ktm", tz="Asia/Kathmandu")
    old, new = both(**year)
    cases["dash_366"] = (
        lambda old=old: base_dashboard.fetch(storage, old),
        lambda new=new: dashboard.fetch(storage, new),
    )
    for by in DIMENSIONS:
        old, new = both(dimension=by)
        cases[f"bd_{by}"] = (
            lambda old=old: base_breakdown.fetch_breakdown(storage, old),
            lambda new=new: breakdown.fetch_breakdown(storage, new),
        )
    for dim, raw in FILTERS.items():
        dash(f"fdash_{dim}", filters=raw)
        for by in sorted({"path", "source", FILTERED_BY[dim]}):
            old, new = both(filters=raw, dimension=by)
            cases[f"fbd_{dim}_by_{by}"] = (
                lambda old=old: base_breakdown.fetch_breakdown(storage, old),
                lambda new=new: breakdown.fetch_breakdown(storage, new),
            )

    async def run() -> None:
        print(f"{'case':28s} {'main ms':>9s} {'branch ms':>9s}  (medians of {n}, interleaved)")
        for name, (a, b) in cases.items():
            if only and not any(
                name == o.rstrip("$") if o.endswith("$") else name.startswith(o) for o in only
            ):
                continue
            same = _plain(await a()) == _plain(await b())
            ta, tb = [], []
            for _ in range(n):
                for fn, out in ((a, ta), (b, tb)):
                    started = time.perf_counter()
                    await fn()
                    out.append((time.perf_counter() - started) * 1000)
            print(
                f"{name:28s} {statistics.median(ta):9.0f} {statistics.median(tb):9.0f}"
                f"  {'same answer' if same else 'ANSWERS DIFFER'}",
                flush=True,
            )

    try:
        asyncio.run(run())
    finally:
        storage.close()


def _plain(answer: object) -> object:
    """An answer of either package as plain values (their row classes differ), each list of a
    dashboard's rows sorted (the timeline's days come in the engine's order of the moment)."""
    if dataclasses.is_dataclass(answer) and not isinstance(answer, type):
        return tuple(
            sorted(v, key=repr) if isinstance(v, list) else v for v in dataclasses.astuple(answer)
        )
    return answer


if __name__ == "__main__":
    main()

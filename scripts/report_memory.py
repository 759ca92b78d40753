"""One-off: the memory of the query API's heaviest kind of question, on a copy of a tenant's data
folder (``<folder>/clickhouse``, e.g. the one scripts/speed_load.py writes, moved there). Not part
of the package; the README's "One heavy query does not take the rest down" quotes it.

Serves the folder with ``TALLY_REPORT_MEMORY_MB`` = ``cap`` (0: the default, a quarter of the
engine's memory), asks ``POST /api/v2/query`` for a year by hour, entry page, exit page and
campaign (session metrics), and prints its status, time and the server's peak resident memory
(all its processes, sampled every 50 ms). Then it asks the dashboard views the site owners'
part of the speed suite times (90 days unfiltered and filtered by each of source, country,
path and browser, each with four breakdowns, and a year compared with the year before) and
prints how many were answered 200 under the same cap.

Usage: PYTHONPATH=service:. python scripts/report_memory.py <folder> <tenant project id> [cap]"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.parse
from datetime import date, timedelta
from pathlib import Path

import httpx
from benchmarks.common import serve

FILTERS = [
    None,
    ["is", "source", ["Google"]],
    ["is", "country", ["DE"]],
    ["contains", "path", ["/blog"]],
    ["is", "browser", ["Chrome"]],
]


def views(tenant: str) -> list[str]:
    """Paths and queries of the dashboard views: each filter's dashboard and four breakdowns,
    and the last 366 days compared with the period before."""
    out = []
    for kept in FILTERS:
        query = f"projectId={tenant}&days=90"
        if kept:
            query += "&filters=" + urllib.parse.quote(json.dumps([kept]))
        out.append(f"/api/dashboard?{query}")
        breakdowns = ("source", "path", "country", "entryPage")
        out += [f"/api/breakdown?{query}&by={by}" for by in breakdowns]
    year = f"from={date.today() - timedelta(days=365)}&to={date.today()}"
    out.append(f"/api/dashboard?projectId={tenant}&{year}&compare=previous_period")
    return out


def tree(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [pid, *(p for child in found.split() for p in tree(int(child)))]


def resident(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    found = re.search(r"VmRSS:\s+(\d+)", status)
    return int(found.group(1)) * 1024 if found else 0


def main() -> None:
    folder, tenant = Path(sys.argv[1]).resolve(), sys.argv[2]
    cap = sys.argv[3] if len(sys.argv) > 3 else "0"
    body = {
        "site_id": tenant,
        "metrics": ["visitors", "visits", "bounce_rate", "visit_duration"],
        "date_range": "366d",
        "dimensions": ["time:hour", "visit:entry_page", "visit:exit_page", "visit:utm_campaign"],
        "pagination": {"limit": 10000, "offset": 0},
    }
    with serve(folder, report_memory_mb=cap) as server:
        lane = httpx.get(f"{server.url}/api/health").json()["reports"]
        peak, done = [0], threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], sum(resident(p) for p in tree(server.proc.pid)))
                time.sleep(0.05)

        sampler = threading.Thread(target=sample)
        sampler.start()
        started = time.perf_counter()
        answer = httpx.post(
            f"{server.url}/api/v2/query", json=body, headers=server.headers(), timeout=900
        )
        took = time.perf_counter() - started
        done.set()
        sampler.join()
        statuses = [
            httpx.get(f"{server.url}{view}", headers=server.headers(), timeout=300).status_code
            for view in views(tenant)
        ]
    print(
        f"cap {lane['memoryMb']} MiB: query API {answer.status_code} in {took:.1f} s, "
        f"peak resident {peak[0] / 2**30:.2f} GiB; dashboard views after it answered 200: "
        f"{statuses.count(200)} of {len(statuses)}"
    )
    if answer.status_code != 200:
        print(answer.text[:400])


if __name__ == "__main__":
    main()

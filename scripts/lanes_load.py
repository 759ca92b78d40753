"""One-off: the report lane under load, on a copy of a tenant's data folder
(``<folder>/clickhouse``, e.g. the one scripts/speed_load.py writes, moved there). Not part of
the package; the README's "Freshness" and "Views clicked past stop" paragraphs quote it.

- ``users N [seconds]``: sends one event every 20 ms to a new project of its own, keeps ``N``
  clients opening the tenant's 90-day dashboard filtered by source Google, and every half second
  asks /api/health for the age of the oldest unloaded event and times the answer.
- ``abandon N``: times that dashboard alone, then asks it for ``N`` other sources, leaving each
  after 0.3 s (a site owner clicking through), and times it again.

Usage: PYTHONPATH=service:. python scripts/lanes_load.py <folder> <tenant project id> users 4"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import httpx
from benchmarks.common import percentile, serve

SOURCES = ["Bing", "DuckDuckGo", "Twitter", "Facebook", "Reddit", "LinkedIn", "Yahoo!"]


def dashboard(server: Any, tenant: str, source: str) -> str:
    filters = urllib.parse.quote(json.dumps([["is", "source", [source]]]))
    return f"{server.url}/api/dashboard?projectId={tenant}&days=90&filters={filters}"


def abandon(folder: Path, tenant: str, clicks: int) -> None:
    with serve(folder) as server:
        headers = server.headers()

        def timed() -> float:
            started = time.perf_counter()
            httpx.get(dashboard(server, tenant, "Google"), headers=headers, timeout=300)
            return time.perf_counter() - started

        timed()  # warm
        alone = timed()
        time.sleep(2)
        for source in SOURCES[:clicks]:
            with contextlib.suppress(httpx.TimeoutException):
                httpx.get(dashboard(server, tenant, source), headers=headers, timeout=0.3)
        after = timed()
        lane = httpx.get(f"{server.url}/api/health").json().get("reports")
    print(f"alone {alone:.2f} s; after {clicks} views left after 0.3 s: {after:.2f} s; {lane}")


def main() -> None:
    folder, tenant, mode = Path(sys.argv[1]).resolve(), sys.argv[2], sys.argv[3]
    if mode == "abandon":
        abandon(folder, tenant, int(sys.argv[4]))
        return
    users = int(sys.argv[4])
    seconds = float(sys.argv[5]) if len(sys.argv) > 5 else 40.0
    with serve(folder) as server:
        _, key = server.new_project()
        headers = server.headers()
        stop = threading.Event()
        acks: list[int] = []
        dashboards: list[float] = []

        def send() -> None:
            with httpx.Client(timeout=30) as client:
                while not stop.is_set():
                    event = {"name": "pageview", "path": "/", "visitorId": "v", "sessionId": "s"}
                    response = client.post(
                        f"{server.url}/api/collect",
                        headers={"x-api-key": key},
                        json={"events": [event]},
                    )
                    acks.append(response.status_code)
                    time.sleep(0.02)

        def open_dashboards() -> None:
            url = dashboard(server, tenant, "Google")
            with httpx.Client(timeout=300) as client:
                while not stop.is_set():
                    started = time.perf_counter()
                    client.get(url, headers=headers).raise_for_status()
                    dashboards.append(time.perf_counter() - started)

        threads = [threading.Thread(target=send)]
        threads += [threading.Thread(target=open_dashboards) for _ in range(users)]
        for thread in threads:
            thread.start()
        ages: list[float] = []
        health: list[float] = []
        end = time.monotonic() + seconds
        with httpx.Client(timeout=60) as client:
            while time.monotonic() < end:
                started = time.perf_counter()
                backlog = client.get(f"{server.url}/api/health").json()["backlog"]
                health.append(time.perf_counter() - started)
                ages.append(backlog["oldestAgeSeconds"] or 0.0)
                time.sleep(0.5)
        stop.set()
        for thread in threads:
            thread.join()
    print(f"users {users}: {len(acks)} events sent, answers {sorted(set(acks))}")
    if dashboards:
        print(f"dashboards: {len(dashboards)}, median {percentile(dashboards, 50):.2f} s")
    print(f"oldest unloaded event: median {percentile(ages, 50):.1f} s, max {max(ages):.1f} s")
    print(f"health: median {percentile(health, 50):.2f} s, max {max(health):.2f} s")


if __name__ == "__main__":
    main()

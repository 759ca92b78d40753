"""How fast does GET /api/export stream a big range, per format?

A worker process (the embedded engine allows one process per data folder) loads a tenant with the
generator (events over the last 100 days) and waits for the merges the load started; then a real
``tally serve`` on that data streams the tenant's whole range in each format over loopback, and
the client counts what arrives (lines of CSV and NDJSON, the Parquet footer's row count), so a
figure is only kept for an export that carried every event.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from .common import bench_url, drop_bench_database, percentile, serve

FORMATS = ("csv", "ndjson", "parquet")
# The exports timed: (key, format, Accept-Encoding). CSV and NDJSON also as a browser or
# `curl --compressed` gets them, gzipped by the server (http/compression.py).
VARIANTS = (
    *((fmt, fmt, "identity") for fmt in FORMATS),
    ("csv_gzip", "csv", "gzip"),
    ("ndjson_gzip", "ndjson", "gzip"),
)


def _worker(url: str, events: int) -> dict[str, Any]:
    from tally.storage.client import Storage, parse_url
    from tally.storage.migrate import migrate
    from tally.storage.projects import ProjectStore

    from .generate import generate, settle_merges

    storage = Storage(parse_url(url), pool_size=2)
    migrate(storage)
    tenant, _, _ = ProjectStore(storage).create_project("bench", f"export {events}")
    load_seconds = generate(storage, tenant.id, events, seed=1)
    settle_merges(storage)
    storage.close()
    return {"tenant": tenant.id, "load_seconds": round(load_seconds, 2)}


def _rows(fmt: str, body: io.BytesIO | None, lines: int) -> int:
    if fmt == "parquet":
        import pyarrow.parquet as pq

        assert body is not None
        return int(pq.ParquetFile(body).metadata.num_rows)
    return lines - (fmt == "csv")  # the CSV header


def export_once(client: httpx.Client, query: dict[str, str], headers: dict[str, str]) -> dict:
    """One whole export: seconds, bytes of the file, bytes on the wire, rows. ``headers`` say
    which encoding the client takes; a gzipped answer is decoded as it arrives, as a browser
    does."""
    keep = query["format"] == "parquet"  # a Parquet file is read from its footer
    body = io.BytesIO() if keep else None
    size = lines = 0
    started = time.perf_counter()
    with client.stream("GET", "/api/export", params=query, headers=headers) as response:
        response.raise_for_status()
        for chunk in response.iter_bytes():
            size += len(chunk)
            if body is not None:
                body.write(chunk)
            else:
                lines += chunk.count(b"\n")
        wire = response.num_bytes_downloaded
    seconds = time.perf_counter() - started
    rows = _rows(query["format"], body, lines)
    return {"seconds": seconds, "bytes": size, "wire_bytes": wire, "rows": rows}


def median_seconds(runs: list[dict[str, Any]]) -> float:
    """The median of the runs' seconds (of two, their mean), as every median of the suite."""
    return percentile([r["seconds"] for r in runs], 50)


def run(
    events: int,
    repeat: int,
    workdir: Path | None = None,
    clickhouse_url: str = "",
    workers: int = 1,
) -> dict[str, Any]:
    """Per format: events/s and MB/s of the median of ``repeat`` exports of ``events`` events
    (after one warm export), with the bytes and rows of the file."""
    with tempfile.TemporaryDirectory(prefix="tally-bench-export-") as tmp:
        data = (workdir or Path(tmp)) / "export"
        data.mkdir(parents=True, exist_ok=True)
        url = bench_url(clickhouse_url, "export", data)
        drop_bench_database(url)
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.export", "--worker", url, str(events)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"export worker failed: {done.stderr[-2000:]}")
        loaded = json.loads(done.stdout.strip().splitlines()[-1])
        today = datetime.now(UTC).date()
        out: dict[str, Any] = {"events": events, "load_seconds": loaded["load_seconds"]}
        # The per-user export limit is lifted: the suite exports more often than a person would.
        with (
            serve(data, url, workers, export_limit_per_user="") as server,
            httpx.Client(base_url=server.url, timeout=600) as client,
        ):
            for key, fmt, encoding in VARIANTS:
                headers = {**server.headers("bench"), "accept-encoding": encoding}
                query = {
                    "projectId": loaded["tenant"],
                    "from": (today - timedelta(days=101)).isoformat(),
                    "to": today.isoformat(),
                    "format": fmt,
                }
                export_once(client, query, headers)  # warm
                runs = [export_once(client, query, headers) for _ in range(repeat)]
                if any(r["rows"] != events for r in runs):
                    raise RuntimeError(f"{key} export carried {runs[0]['rows']} of {events} events")
                seconds = median_seconds(runs)
                size = runs[0]["bytes"]
                out[key] = {
                    "events_per_s": round(events / seconds),
                    "mb_per_s": round(size / seconds / 1e6, 1),
                    "seconds": round(seconds, 3),
                    "bytes": size,
                    "wire_bytes": runs[0]["wire_bytes"],
                }
        return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", nargs=2, metavar=("URL", "EVENTS"))
    args = parser.parse_args()
    if args.worker:
        url, events = args.worker
        print(json.dumps(_worker(url, int(events))))

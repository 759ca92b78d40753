"""How many events per second does Tally take in, and how close is that to its HTTP ceiling?

wrk (a compiled load generator, so the client is not the bottleneck) drives a real ``tally serve``
over loopback at a fixed concurrency for a fixed time, in two shapes: 100-event batches and
single-event requests (the browser case). The same run, against a server started with
``TALLY_BENCH_NOOP_STORAGE=true`` (same HTTP stack and decoder, storage write replaced by a no-op),
gives the ceiling; results are reported as ratios to it, which survive a noisy machine. A bare
Litestar + msgspec handler under the same granian settings (benchmarks/bare_app.py), decoding the
same body into the same Struct and answering 202, gives the framework's own ceiling
(``framework_*``, ``ceiling_over_framework``): what Tally's request path costs. After each
real run the events stored are counted (once the dashboard's ``dataThrough`` says everything
acknowledged is loaded) and compared with the events the server says it acknowledged (its
``/api/health`` counter ``acknowledgedEvents``: appended to its ingest log, fsynced, answered
202), both ways: none lost, none stored twice. wrk's own count of 202s is reported beside it but
is not the check: requests cut off by wrk's deadline may be stored without wrk counting them.
The worker's health counters also give the INSERTs per second ClickHouse saw under that load and
the rows per INSERT. The counters are a worker's own: with several workers each reading may come
from another one, so the exact check and those figures need one worker (the embedded engine's
only setting); with several the loss check falls back to wrk's count (net: it cannot see up to
connections x events per request lost).

``backlog``: a server whose INSERTs fail (the fault hook) acknowledges ``backlog_events`` events to
its ingest log; it is stopped, started again on the same data without the fault, and the time
from healthy to everything loaded is reported (``backlog.load_s``), with the events lost.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from .bare_app import serve_bare
from .common import (
    bench_url,
    drop_bench_database,
    duplicate_events,
    lost_events,
    percentile,
    serve,
    tree,
)

LUA = Path(__file__).resolve().parent / "lua" / "collect.lua"
SHAPES = {"batch": 100, "single": 1}


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def parse_wrk(output: str) -> dict[str, Any]:
    """The TALLY_RESULT line the Lua script prints."""
    for line in output.splitlines():
        if line.startswith("TALLY_RESULT "):
            return dict(json.loads(line.removeprefix("TALLY_RESULT ")))
    raise ValueError(f"no TALLY_RESULT line in wrk output:\n{output}")


def drive(url: str, key: str, events: int, connections: int, seconds: float) -> dict[str, Any]:
    env = {**os.environ, "TALLY_KEY": key, "TALLY_EVENTS": str(events)}
    done = subprocess.run(
        [
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{seconds:g}s",
            "--timeout",
            "10s",
            "-s",
            str(LUA),
            url,
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return parse_wrk(done.stdout)


def stored_events(
    server_url: str,
    project_id: str,
    headers: dict[str, str],
    through: datetime | None = None,
    timeout: float = 1800,
) -> int:
    """Events of the project in ClickHouse, once the dashboard includes every event acknowledged
    before ``through`` (its ``dataThrough``; default: now)."""
    through = through or datetime.now(UTC)
    deadline = time.monotonic() + timeout
    while True:
        response = httpx.get(
            f"{server_url}/api/dashboard",
            params={"projectId": project_id, "days": 2},
            headers=headers,
            timeout=60,
        )
        response.raise_for_status()
        body = response.json()
        if datetime.fromisoformat(body["dataThrough"]) >= through:
            return int(body["summary"]["totalEvents"])
        if time.monotonic() > deadline:
            raise RuntimeError(f"the ingest log was not loaded within {timeout:.0f} s")
        time.sleep(0.2)


def loader_counters(server_url: str) -> dict[str, Any]:
    """The ingest log's and loader's counters of the worker that answers (all of them with one
    worker): ``acknowledgedEvents``, ``inserts``, ``loadedEvents``, ..."""
    response = httpx.get(f"{server_url}/api/health", timeout=60)
    response.raise_for_status()
    return dict(response.json()["backlog"])


def acknowledged_and_stored(
    server_url: str, project_id: str, headers: dict[str, str], timeout: float = 1800
) -> tuple[int, int, dict[str, Any]]:
    """(events the worker acknowledged, events of the project stored, the counters) at one
    moment: the stored count is read once everything acknowledged before it is loaded, between
    two readings of the counter that agree, so that no acknowledgement falls between the two
    figures (a request cut off by wrk's deadline may still be completing). One worker only: the
    counter is a worker's own."""
    deadline = time.monotonic() + timeout
    while True:
        first = loader_counters(server_url)
        stored = stored_events(server_url, project_id, headers, timeout=timeout)
        again = loader_counters(server_url)
        if again["acknowledgedEvents"] == first["acknowledgedEvents"]:
            return int(again["acknowledgedEvents"]), stored, again
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server kept acknowledging events for {timeout:.0f} s")
        time.sleep(0.2)


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user and system) used so far by ``pid`` and the processes below it; 0 where
    /proc is not there. Sampled around a run, it says how much of the two cores the server
    itself took: the real server's INSERTs (chDB runs them in the worker process) against the
    no-op ceiling's nothing."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0
    for current in tree(pid):
        try:
            with open(f"/proc/{current}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / ticks


def measure(
    shape: str,
    seconds: float,
    connections: int,
    noop: bool,
    workdir: Path,
    clickhouse_url: str = "",
    workers: int = 1,
) -> dict[str, Any]:
    per_request = SHAPES[shape]
    name = f"ingest_{shape}_{connections}_{'noop' if noop else 'real'}"
    data = workdir / name
    data.mkdir(parents=True)
    url = bench_url(clickhouse_url, name, data)
    drop_bench_database(url)
    settings = {"bench_noop_storage": "true"} if noop else {}
    with serve(data, url, workers, **settings) as server:
        project_id, key = server.new_project()
        drive(server.url, key, per_request, connections, 1)  # warm-up, not counted
        exact = not noop and workers == 1  # the server's own count: one worker's (above)
        before, counters = 0, None
        if exact:
            acked_before, before, counters = acknowledged_and_stored(
                server.url, project_id, server.headers()
            )
        elif not noop:
            before = stored_events(server.url, project_id, server.headers())
        cpu_before = tree_cpu_s(server.proc.pid)
        result = drive(server.url, key, per_request, connections, seconds)
        cpu = tree_cpu_s(server.proc.pid) - cpu_before
        during = loader_counters(server.url) if exact else None
        acknowledged = result["accepted_requests"] * per_request
        out = {
            "events_per_s": round(acknowledged / result["duration_s"], 1),
            "requests_per_s": round(result["accepted_requests"] / result["duration_s"], 1),
            "p50_ms": result["p50_ms"],
            "p99_ms": result["p99_ms"],
            "refused_requests": result["refused_requests"],
            "errors": result["errors"],
            "worker_cpu_s_per_s": round(cpu / result["duration_s"], 3),
        }
        if exact and counters is not None and during is not None:
            # Against what the server acknowledged, both ways.
            acked_after, stored_after, after = acknowledged_and_stored(
                server.url, project_id, server.headers()
            )
            server_acked, stored = acked_after - acked_before, stored_after - before
            out["acknowledged_events"] = acknowledged
            out["server_acknowledged_events"] = server_acked
            out["stored_events"] = stored
            out["lost_events"] = lost_events(server_acked, stored)
            out["duplicate_events"] = duplicate_events(server_acked, stored)
            # What ClickHouse saw: INSERTs per second during the load, rows per INSERT overall.
            # The counters are a worker's own, and each health check may reach another worker:
            # with several, differences of two readings would mix workers, so none is given.
            out["inserts_per_s"] = round(
                (during["inserts"] - counters["inserts"]) / result["duration_s"], 2
            )
            inserts = after["inserts"] - counters["inserts"]
            rows = after["loadedEvents"] - counters["loadedEvents"]
            out["rows_per_insert"] = round(rows / inserts, 1) if inserts else 0
        elif not noop:
            # Several workers: wrk's count, a net check. Requests cut off by wrk's deadline may
            # be stored without wrk counting them: half a second's margin for them to complete.
            through = datetime.now(UTC) + timedelta(seconds=0.5)
            time.sleep(0.5)
            stored = stored_events(server.url, project_id, server.headers(), through) - before
            out["acknowledged_events"] = acknowledged
            out["stored_events"] = stored
            out["lost_events"] = lost_events(acknowledged, stored)
    return out


def settled_acknowledged(server_url: str, quiet: float = 1.0, timeout: float = 600) -> int:
    """The worker's ``acknowledgedEvents`` once it has not moved for ``quiet`` seconds (the
    requests wrk cut off have completed). One worker only."""
    deadline = time.monotonic() + timeout
    last = loader_counters(server_url)["acknowledgedEvents"]
    while True:
        time.sleep(quiet)
        now = loader_counters(server_url)["acknowledgedEvents"]
        if now == last:
            return int(now)
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server kept acknowledging events for {timeout:.0f} s")
        last = now


def measure_backlog(
    events: int, workdir: Path, clickhouse_url: str = "", workers: int = 1
) -> dict[str, Any]:
    """Time to load ``events`` acknowledged while ClickHouse refused them, after a restart."""
    data = workdir / "ingest_backlog"
    data.mkdir(parents=True)
    url = bench_url(clickhouse_url, "ingest_backlog", data)
    drop_bench_database(url)
    fault = data / "fault"
    fault.write_text("fail")
    acknowledged = 0
    server_acked = None
    with serve(data, url, workers, fault_file=str(fault), load_retry_max_ms="1000") as server:
        project_id, key = server.new_project()
        while acknowledged < events:
            result = drive(server.url, key, SHAPES["batch"], 64, 2)
            acknowledged += result["accepted_requests"] * SHAPES["batch"]
        if workers == 1:  # the worker's own count (see measure)
            server_acked = settled_acknowledged(server.url)
        headers = server.headers()
    fault.unlink()
    with serve(data, url, workers) as server:
        started = time.monotonic()
        stored = stored_events(server.url, project_id, headers, datetime.now(UTC))
        took = time.monotonic() - started
    out = {
        "acknowledged_events": acknowledged,
        "stored_events": stored,
        "load_s": round(took, 2),
        "events_per_s": round(stored / took, 1) if took else 0,
    }
    if server_acked is None:
        out["lost_events"] = lost_events(acknowledged, stored)  # net (several workers)
    else:
        out["server_acknowledged_events"] = server_acked
        out["lost_events"] = lost_events(server_acked, stored)
        out["duplicate_events"] = duplicate_events(server_acked, stored)
    return out


def measure_framework(
    shape: str, seconds: float, connections: int, workdir: Path, workers: int = 1, **_: Any
) -> dict[str, Any]:
    """The same load against the bare Litestar + msgspec handler (benchmarks/bare_app.py)."""
    per_request = SHAPES[shape]
    with serve_bare(workdir, workers) as url:
        drive(url, "bare", per_request, connections, 1)  # warm-up, not counted
        result = drive(url, "bare", per_request, connections, seconds)
    return {
        "events_per_s": round(result["accepted_requests"] * per_request / result["duration_s"], 1),
        "requests_per_s": round(result["accepted_requests"] / result["duration_s"], 1),
        "p50_ms": result["p50_ms"],
        "p99_ms": result["p99_ms"],
        "refused_requests": result["refused_requests"],
    }


def measure_fsync(directory: Path, samples: int = 200) -> dict[str, Any]:
    """What the disk under the ingest log charges per acknowledgement: fsync of a 4 KiB append in
    ``directory`` (where the servers keep their logs), ``samples`` times. A 202 waits for one
    such fsync, so with ``n`` connections in a closed loop no server that acknowledges only after
    fsync can answer more than ``n / fsync`` requests per second, however fast its HTTP stack."""
    path = directory / "fsync-probe"
    took: list[float] = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for _ in range(samples):
            os.write(fd, b"x" * 4096)
            started = time.perf_counter()
            os.fsync(fd)
            took.append((time.perf_counter() - started) * 1000)
    finally:
        os.close(fd)
        path.unlink()
    return fsync_figures(took)


def fsync_figures(took_ms: list[float]) -> dict[str, Any]:
    """p50 and p99 of fsync samples (ms), as every other percentile of the suite."""
    return {
        "fsync_p50_ms": round(percentile(took_ms, 50), 3),
        "fsync_p99_ms": round(percentile(took_ms, 99), 3),
        "samples": len(took_ms),
    }


def disk_bound(connections: int, fsync_ms: float) -> float:
    """Requests per second that ``connections`` closed-loop clients can get acknowledged when
    each acknowledgement waits for one fsync of ``fsync_ms`` (group commit shares it at best)."""
    return round(connections * 1000 / fsync_ms, 1) if fsync_ms > 0 else 0.0


def ratio(over: float, under: float) -> float:
    return round(over / under, 3) if under else 0.0


def measure_against_ceiling(
    shape: str, seconds: float, connections: int, **where: Any
) -> dict[str, Any]:
    """One shape at one concurrency against real storage, then against the no-op ceiling, then
    against the bare framework handler: three servers, one after another, the same load."""
    real = measure(shape, seconds, connections, noop=False, **where)
    ceiling = measure(shape, seconds, connections, noop=True, **where)
    bare = measure_framework(shape, seconds, connections, **where)
    real["ceiling_events_per_s"] = ceiling["events_per_s"]
    real["ceiling_requests_per_s"] = ceiling["requests_per_s"]
    real["ceiling_p50_ms"] = ceiling["p50_ms"]
    real["ceiling_p99_ms"] = ceiling["p99_ms"]
    real["ceiling_worker_cpu_s_per_s"] = ceiling["worker_cpu_s_per_s"]
    real["p99_over_ceiling_ms"] = round(real["p99_ms"] - ceiling["p99_ms"], 3)
    real["ceiling_ratio"] = ratio(real["events_per_s"], ceiling["events_per_s"])
    real["framework_events_per_s"] = bare["events_per_s"]
    real["framework_requests_per_s"] = bare["requests_per_s"]
    real["framework_p99_ms"] = bare["p99_ms"]
    real["framework_refused_requests"] = bare["refused_requests"]
    real["ceiling_over_framework"] = ratio(ceiling["events_per_s"], bare["events_per_s"])
    return real


def run(
    seconds: float,
    connections: dict[str, int],
    clickhouse_url: str = "",
    workers: int = 1,
    sweep: list[int] | None = None,
    backlog_events: int = 0,
) -> dict[str, Any]:
    """Both shapes against real storage and against the no-op ceiling; ``clickhouse_url`` (a
    server, see common.bench_url) replaces the embedded engine. ``sweep`` repeats both at each of
    those connection counts (``<shape>.by_connections.<n>``): how latency and throughput trade as
    concurrency grows, for the real server and its ceiling alike."""
    if not wrk_available():
        raise RuntimeError("wrk is not installed (Debian: apt-get install wrk)")
    results: dict[str, Any] = {}
    lost = duplicates = 0
    with tempfile.TemporaryDirectory(prefix="tally-ingest-") as tmp:
        where: dict[str, Any] = {
            "workdir": Path(tmp),
            "clickhouse_url": clickhouse_url,
            "workers": workers,
        }
        results["disk"] = measure_fsync(Path(tmp))
        fsync_ms = results["disk"]["fsync_p50_ms"]
        for shape in SHAPES:
            real = measure_against_ceiling(shape, seconds, connections[shape], **where)
            real["disk_bound_requests_per_s"] = disk_bound(connections[shape], fsync_ms)
            points = {connections[shape]: real}
            for n in sweep or []:
                if n in points:
                    continue
                point = measure_against_ceiling(shape, seconds, n, **where)
                point["disk_bound_requests_per_s"] = disk_bound(n, fsync_ms)
                points[n] = point
            for point in points.values():
                lost += point["lost_events"]
                duplicates += point.get("duplicate_events", 0)
            results[shape] = with_by_connections(real, points)
        if backlog_events:
            results["backlog"] = measure_backlog(backlog_events, **where)
            lost += results["backlog"]["lost_events"]
            duplicates += results["backlog"].get("duplicate_events", 0)
    results["lost_events"] = lost
    results["duplicate_events"] = duplicates
    return results


def with_by_connections(main: dict[str, Any], points: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """``main`` (the figures at the main connection count) with ``by_connections``: every count
    measured, the main one included, whether or not there was a sweep: one table."""
    out = dict(main)
    out["by_connections"] = {
        str(n): {k: v for k, v in point.items() if k != "by_connections"}
        for n, point in sorted(points.items())
    }
    return out

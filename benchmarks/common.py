"""Shared pieces: percentiles, a `tally serve` process on loopback, machine facts, results."""

from __future__ import annotations

import json
import math
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

import httpx

RESULTS = Path(__file__).resolve().parent / "results"
JWT_SECRET = "benchmark-secret-0123456789abcdef0123456789"


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation between closest ranks."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError("q must be within 0..100")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def lost_events(acknowledged: int, stored: int) -> int:
    """Acknowledged events missing from storage. Extra stored rows are reported separately."""
    return max(0, acknowledged - stored)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def machine() -> dict[str, Any]:
    memory = 0
    try:
        with open("/proc/meminfo") as fh:
            memory = int(fh.readline().split()[1]) * 1024
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "memory_bytes": memory,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def git_commit() -> str:
    """The commit measured, ``-dirty`` after it when the tree holds changes not in it."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], capture_output=True, text=True, cwd=Path(__file__).parent, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{commit}-dirty" if changed else commit


def storage_kind(url: str) -> str:
    return "embedded" if not url or url.startswith("chdb:") else "server"


def bench_url(base: str, name: str, data_dir: Path) -> str:
    """Where one benchmark run keeps its data: a fresh embedded engine under ``data_dir`` by
    default; with ``base`` a server URL, the database ``tally_bench_<name>`` on that server (the
    runs never touch the database the URL names); with ``base`` a ``chdb:///path``, a folder
    ``<path>/<name>``."""
    if not base:
        return f"chdb://{data_dir / 'clickhouse'}"
    parts = urlsplit(base)
    if parts.scheme == "chdb":
        query = f"?{parts.query}" if parts.query else ""
        return f"chdb://{parts.path.rstrip('/')}/{name}{query}"
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"unsupported ClickHouse URL {base!r}: use chdb:///path or http(s)://")
    return urlunsplit(parts._replace(path=f"/tally_bench_{name}", query=""))


def drop_bench_database(url: str) -> None:
    """Start a server run from an empty ``tally_bench_*`` database (embedded runs start fresh)."""
    if storage_kind(url) == "embedded":
        return
    from tally.storage.client import connect, parse_url

    target = parse_url(url)
    if not target.database.startswith("tally_bench_"):
        raise ValueError(f"refusing to drop {target.database!r}: not a benchmark database")
    try:
        client = connect(target, database="")
    except Exception as exc:  # the first thing a run asks of the server: say so in words
        raise SystemExit(
            f"benchmarks: cannot reach {target.description} (--clickhouse-url): {exc}"
        ) from None
    try:
        client.command(f"DROP DATABASE IF EXISTS {target.database} SYNC")
    finally:
        client.close()


class Server:
    """A real `tally serve` subprocess on a loopback port."""

    def __init__(self, url: str, port: int, proc: subprocess.Popen[str]) -> None:
        self.url, self.port, self.proc = url, port, proc

    def token(self, sub: str = "bench") -> str:
        import jwt

        now = int(time.time())
        return jwt.encode({"sub": sub, "iat": now, "exp": now + 86400}, JWT_SECRET, "HS256")

    def headers(self, sub: str = "bench") -> dict[str, str]:
        return {"authorization": f"Bearer {self.token(sub)}"}

    def new_project(self, sub: str = "bench") -> tuple[str, str]:
        response = httpx.post(
            f"{self.url}/api/projects",
            json={"name": "bench"},
            headers=self.headers(sub),
            timeout=30,
        )
        response.raise_for_status()
        return response.json()["projectId"], response.json()["apiKey"]


def wait_up(
    proc: subprocess.Popen[str], health: str, log: Path, what: str, timeout: float, step: float
) -> None:
    """Until ``health`` answers 200; an error naming ``what`` if the process exits first (with
    its log) or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited: {log.read_text()}")
        try:
            if httpx.get(health, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not become healthy")
        time.sleep(step)


@contextmanager
def serve(
    data_dir: Path, clickhouse_url: str = "", workers: int = 1, **settings: str
) -> Iterator[Server]:
    """Run `tally serve` (``workers`` processes: a server URL allows more than one) with
    benchmark-friendly limits until the block ends."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_")}
    env.update(
        {
            "TALLY_DATA_DIR": str(data_dir),
            "TALLY_JWT_SECRET": JWT_SECRET,
            "TALLY_COLLECT_LIMIT_PER_KEY": "",
            "TALLY_COLLECT_LIMIT_PER_IP": "",
            "TALLY_SESSION_LIMIT_PER_USER": "",
            "TALLY_LOG_LEVEL": "WARNING",
        }
    )
    if clickhouse_url:
        env["TALLY_CLICKHOUSE_URL"] = clickhouse_url
    env.update({f"TALLY_{k.upper()}": str(v) for k, v in settings.items()})
    log = open(data_dir / f"serve-{port}.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "tally", "serve", "--port", str(port), "--workers", str(workers)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_up(proc, f"{url}/api/health", Path(log.name), "tally serve", timeout=120, step=0.2)
        yield Server(url, port, proc)
    except BaseException as exc:
        stop(proc, log)
        # The data folder (often a temporary one) goes with the run: what the server said goes
        # with the error.
        exc.add_note(f"the end of tally serve's log:\n{Path(log.name).read_text()[-2000:]}")
        raise
    stop(proc, log)


def stop(proc: subprocess.Popen[str], log: IO[str], timeout: float = 60) -> None:
    """SIGTERM ``proc`` (a served process), kill it after ``timeout`` seconds, close its log."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def write_results(results: dict[str, Any], name: str = "latest.json") -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / name
    path.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    return path


def flatten(results: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in results.items():
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            out.update(flatten(value, name))
        else:
            out[name] = value
    return out

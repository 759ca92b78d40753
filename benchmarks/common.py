"""Shared pieces: percentiles, a `tally serve` process on loopback, machine facts, results."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import shutil
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


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1 (``2.5``, ``nan``, ``-4`` and ``0`` are
    refused with a plain message)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def lost_events(acknowledged: int, stored: int) -> int:
    """Acknowledged events missing from storage (must be 0). With ``acknowledged`` the count the
    server itself acknowledged, the check is exact; with wrk's count it is net (see ingest.py)."""
    return max(0, acknowledged - stored)


def duplicate_events(acknowledged: int, stored: int) -> int:
    """Events stored beyond those the server acknowledged: stored twice (must be 0)."""
    return max(0, stored - acknowledged)


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


def git_commit(where: Path | None = None) -> str:
    """The commit measured, ``-dirty`` after it when the tree holds changes not in it: changed
    files, and new files git does not ignore (a new module measured is a change too)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args],
            capture_output=True,
            text=True,
            cwd=where or Path(__file__).parent,
            check=True,
        ).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=normal")
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
    """Start a run from empty storage: a server's ``tally_bench_*`` database dropped, an
    embedded run's folder (``bench_url``'s ``<path>/<run>`` for ``--clickhouse-url
    chdb:///path``, else a new temporary one) emptied: a second run on the same path measured
    the first's tenants too."""
    if storage_kind(url) == "embedded":
        folder = Path(urlsplit(url).path)
        if folder.is_dir():
            shutil.rmtree(folder)
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


def loader_insert(storage: Any) -> Any:
    """The loader's own INSERT, its settings included: ``writer.segment_inserter`` as ``tally
    serve`` builds it (``loader=True``: with the embedded engine, EMBEDDED_INSERT_SETTINGS, one
    thread and the views one after another). ``(columns, JSONCompactEachRow body, token)``.
    What the profile and the cost section time, so that they time what the service runs."""
    from tally.storage.writer import segment_inserter

    return segment_inserter(storage)


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
    from tally.supervision import PORT_TAKEN

    # A free port can be taken by another process before the server binds it: the server
    # refuses it then (tally.supervision.claim_port), and another one is tried.
    for attempt in range(1, 4):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = open(data_dir / f"serve-{port}.log", "w")  # noqa: SIM115 - closed below
        command = [sys.executable, "-m", "tally", "serve", "--port", str(port)]
        command += ["--workers", str(workers)]
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        try:
            try:
                wait_up(proc, f"{url}/api/health", Path(log.name), "tally serve", 120, 0.2)
                break
            except RuntimeError:
                if attempt == 3 or PORT_TAKEN not in Path(log.name).read_text():
                    raise
                stop(proc, log)
        except BaseException as exc:
            _stopped_by(exc, proc, log)
            raise
    try:
        yield Server(url, port, proc)
    except BaseException as exc:
        _stopped_by(exc, proc, log)
        raise
    stop(proc, log)


def _stopped_by(exc: BaseException, proc: subprocess.Popen[str], log: IO[str]) -> None:
    """Stop the server of a run that ``exc`` ended, and note the end of its log on ``exc``: the
    data folder (often a temporary one) goes with the run, what the server said with the error."""
    stop(proc, log, stop_timeout(exc))
    exc.add_note(f"the end of tally serve's log:\n{Path(log.name).read_text()[-2000:]}")


def tree(pid: int) -> list[int]:
    """``pid`` and every process below it (the granian workers of a ``tally serve``)."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as fh:
                    todo.extend(int(child) for child in fh.read().split())
        except OSError:
            continue
    return out


def stop_timeout(exc: BaseException) -> float:
    """How long a server stopped because of ``exc`` gets to stop by itself before it is killed:
    60 s after an error of the run, 5 s when the suite itself is stopping (Ctrl-C, SIGTERM),
    since a granian worker still starting up waits out its whole kill timeout (30 s)."""
    return 5 if isinstance(exc, KeyboardInterrupt | SystemExit) else 60


def _started(pid: int) -> str | None:
    """When ``pid`` started (clock ticks after boot), to know it is still the same process."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def stop(proc: subprocess.Popen[str], log: IO[str], timeout: float = 60) -> None:
    """SIGTERM ``proc`` (a served process) and wait for it; if it is still there after
    ``timeout`` seconds, or the wait is interrupted (the suite itself stopped by Ctrl-C or
    SIGTERM), kill it. Either way, every process that was below it (its granian workers) and
    is still there is killed: a server stopped before it handles signals (still starting up)
    leaves its worker behind. Closes its log."""
    below = {pid: _started(pid) for pid in tree(proc.pid)[1:]}
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=timeout)
    except BaseException as exc:
        below.update({pid: _started(pid) for pid in tree(proc.pid)[1:]})
        proc.kill()
        proc.wait()
        if not isinstance(exc, subprocess.TimeoutExpired):
            raise
    finally:
        for pid, started in below.items():
            if started is not None and _started(pid) == started:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        log.close()


def stop_on_sigterm() -> None:
    """Make SIGTERM (what ``timeout`` and a cancelled CI job send) stop the suite the way Ctrl-C
    does: an exception in the main thread, so that every ``finally`` and context manager runs,
    stopping the servers, wrk and workers it started and removing its temporary folders. A
    second SIGTERM during that cleanup is not allowed to cut it short (SIGKILL still can)."""
    stopping = []

    def handler(signum: int, _frame: object) -> None:
        if stopping:
            return
        stopping.append(signum)
        print("benchmarks: stopped by SIGTERM; stopping what it started", file=sys.stderr)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def output_problem(output: str) -> str | None:
    """Why ``--output`` cannot name the results file, or None: it must name a file, not a folder
    (a run of hours ended by IsADirectoryError, writing nothing)."""
    path = Path(output) if "/" in output else RESULTS / output
    if output.endswith("/") or path.name in ("", "..") or path.is_dir() or path == RESULTS:
        return f"{output!r} names a folder; name the results file in it, e.g. {path / 'run.json'}"
    return None


def output_paths(output: str) -> tuple[Path, Path]:
    """Where ``--output`` puts the results and the plot: a bare file name under results/ (the
    default ``latest.json``, whose plot is ``dashboard_latency.png``), a path with a folder
    (``/tmp/x/name.json``, ``./name.json``) there; the plot beside the JSON, named after it."""
    path = Path(output) if "/" in output else RESULTS / output
    stem = path.stem
    if path.parent == RESULTS and stem == "latest":
        return path, RESULTS / "dashboard_latency.png"
    return path, path.with_name(f"{stem}.png")


def write_results(results: dict[str, Any], name: str = "latest.json") -> Path:
    path, _ = output_paths(name)
    path.parent.mkdir(parents=True, exist_ok=True)
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

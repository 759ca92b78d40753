"""A 1M-event export from a real `tally serve`, its process's memory sampled from /proc while the
file streams: the export is hundreds of MB, the server's resident memory grows by a small part of
it (chunks flow through; nothing holds the whole result), whether the client reads at full speed
or slowly (the engine then waits for the reader rather than producing the file ahead of it).

The events are written straight into the server's data folder with one INSERT ... SELECT FROM
numbers() by a separate process (the embedded engine allows one process per folder) while the
server is stopped. They spread over five months, so over five parts (one per monthly partition,
never merged together): reading several parts oldest first merges them, as a project's stored
events usually need (parts of one month not merged yet are read the same way)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import token
from served import Server

pytestmark = pytest.mark.slow

EVENTS = 1_000_000
USER = "exporter"

FILL = """
import sys
import clickhouse_connect
client = clickhouse_connect.get_client(dsn="chdb://" + sys.argv[1])
client.command(
    "INSERT INTO tally.events (project_id, name, occurred_at, received_at, path, url, referrer, "
    "session_id, visitor_id, browser, os, device_type, metadata, ip, user_agent, key_id) "
    "SELECT {p:String}, if(number % 5 = 0, 'signup', 'pageview'), "
    "toDateTime64('2026-01-10 00:00:00', 3, 'UTC') + toIntervalMillisecond(number * 26000), "
    "toDateTime64('2026-01-10 00:00:00', 3, 'UTC') + toIntervalMillisecond(number * 26000), "
    "concat('/products/item-', toString(number % 5000), '/details'), "
    "concat('https://shop.example.com/products/item-', toString(number % 5000), "
    "'/details?utm_source=newsletter&utm_campaign=winter'), 'https://www.google.com/', "
    "concat('s', toString(intDiv(number, 7))), concat('v', toString(intDiv(number, 31))), "
    "'Chrome', 'Windows', 'desktop', {m:String}, "
    "'203.0.113.7', 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like "
    "Gecko) Chrome/131.0.0.0 Safari/537.36', '0123456789abcdef01234567' "
    "FROM numbers({n:UInt64})",
    parameters={"p": sys.argv[2], "n": int(sys.argv[3]), "m": '{"plan":"pro","step":3}'},
)
# Merge now, in this process: otherwise the served engine merges the insert's parts (and their
# projections) in the background while the test samples its memory, and measures the merges.
# One part per month is left (2026-01-10 to 2026-05-28): a partition's parts merge, never two.
client.command("OPTIMIZE TABLE tally.events FINAL")
parts = client.command(
    "SELECT count() FROM system.parts WHERE database = 'tally' AND table = 'events' AND active"
)
assert parts == 11, parts
"""


def group_rss(pgid: int) -> int:
    """Resident bytes of every process in the process group (granian's main and its worker)."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) != pgid:  # field 5 of stat: the process group
                continue
            status = Path(f"/proc/{entry}/status").read_text()
        except (OSError, ValueError):
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
    return total


class Sampler:
    def __init__(self, pgid: int) -> None:
        self.pgid, self.peak = pgid, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, group_rss(self.pgid))
            self._stop.wait(0.02)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


# The server's growth while it streams a 1M-event export, in bytes.
GROWTH_BOUND = 250e6


def _url(server: Server, project: str, fmt: str) -> str:
    return f"{server.url}/api/export?projectId={project}&from=2026-01-10&to=2026-11-30&format={fmt}"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    data = tmp_path_factory.mktemp("export-memory")
    server = Server(data)
    headers = {"authorization": f"Bearer {token(USER)}"}
    try:
        created = httpx.post(
            f"{server.url}/api/projects", json={"name": "Big"}, headers=headers, timeout=30
        )
        assert created.status_code == 201, created.text
        project = created.json()["projectId"]
    finally:
        assert server.stop() == 0
    subprocess.run(
        [sys.executable, "-c", FILL, str(data / "clickhouse"), project, str(EVENTS)],
        check=True,
        timeout=600,
    )
    server = Server(data)
    try:
        # Warm: the first read of the table loads the engine's one-time state (marks, caches,
        # allocator arenas: about 200 MB measured, whatever the export's size), which is not
        # what this measures. Each test then streams the whole export again.
        with httpx.stream("GET", _url(server, project, "csv"), headers=headers, timeout=600) as r:
            assert r.status_code == 200
            for _ in r.iter_raw():
                pass
        yield server, project, headers
    finally:
        server.stop()


@pytest.mark.parametrize("fmt", ["csv", "ndjson", "parquet"])
def test_memory_stays_flat_while_a_million_events_stream(served, fmt: str) -> None:
    server, project, headers = served
    url = _url(server, project, fmt)
    baseline = group_rss(server.proc.pid)
    size = lines = 0
    tail = b""
    with (
        Sampler(server.proc.pid) as sampler,
        httpx.stream("GET", url, headers=headers, timeout=600) as response,
    ):
        assert response.status_code == 200
        # Decoded: CSV and NDJSON travel gzipped to httpx, which asks for it (as browsers do).
        for chunk in response.iter_bytes():
            size += len(chunk)
            lines += chunk.count(b"\n")
            tail = chunk[-8:]
        wire = response.num_bytes_downloaded
    growth = sampler.peak - baseline
    print(
        f"\n{fmt}: {size / 1e6:.0f} MB exported ({wire / 1e6:.0f} MB on the wire); server RSS "
        f"{baseline / 1e6:.0f} MB before, peak {sampler.peak / 1e6:.0f} MB (+{growth / 1e6:.0f} MB)"
    )
    if fmt == "parquet":
        assert tail.endswith(b"PAR1")  # a whole file: the footer came last
    else:
        assert lines == EVENTS + (fmt == "csv")  # every event, plus the CSV header
        assert size > 400e6
    # What the query holds whatever the file's size (its reading of the parts, the writer's row
    # group for Parquet): 104 to 133 MB measured on an idle machine for each format, from the 33
    # MB Parquet file to the 843 MB NDJSON, and up to 152 MB in a loaded clean-clone CI. A file
    # held whole (545 MB CSV, 843 MB NDJSON) is well past it.
    assert growth < GROWTH_BOUND, (growth, size)


SLOW_READ_BYTES = 40_000_000


@pytest.mark.parametrize("fmt", ["csv", "ndjson"])
def test_memory_stays_flat_while_a_slow_reader_downloads(served, fmt: str) -> None:
    """A client that reads 64 KiB every 5 ms (about 13 MB/s at most), then stops reading for 2 s
    and leaves: the engine produces the file as it is read, a block of rows at a time, rather
    than ahead of the reader. It produced the file's merged blocks of 65,409 rows (over 100 MB
    of text each) ahead of a slow reader before: the server grew by about 900 MB per download,
    several GB with a few of them."""
    server, project, headers = served
    url = _url(server, project, fmt)
    time.sleep(1)  # the previous export's query stopped and freed its memory
    baseline = group_rss(server.proc.pid)
    size = 0
    with (
        Sampler(server.proc.pid) as sampler,
        httpx.stream("GET", url, headers=headers, timeout=600) as response,
    ):
        assert response.status_code == 200
        for chunk in response.iter_raw(65536):
            size += len(chunk)
            if size >= SLOW_READ_BYTES:
                break
            time.sleep(0.005)
        time.sleep(2)  # not reading: the server's sends wait, and so should the engine
    growth = sampler.peak - baseline
    print(
        f"\n{fmt}, slow reader: {size / 1e6:.0f} MB read; server RSS {baseline / 1e6:.0f} MB "
        f"before, peak {sampler.peak / 1e6:.0f} MB (+{growth / 1e6:.0f} MB)"
    )
    assert size >= SLOW_READ_BYTES
    # The file is over 500 MB (CSV) or 800 MB (NDJSON): made ahead of this reader, it would grow
    # the server by about that. This read grew it by 70-180 MB alone on the machine and by up
    # to 226 MB in clean-clone CI runs (two test processes, one of them this); 200 MB failed
    # two of them (2026-11-27). With today's engine the same read without the 1,024-row blocks
    # (storage/export.py) measured +163 MB: this bound no longer tells those blocks apart from
    # the engine's default ones, only a file made ahead of its reader.
    assert growth < 350e6, growth

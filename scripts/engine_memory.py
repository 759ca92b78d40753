"""One-off: what a query that needs more memory than the engine has does to the queries beside
it, on a copy of a data folder holding a large tenant (``<folder>/clickhouse``, e.g. the one
scripts/speed_load.py writes). Not part of the package; the README's "One heavy query fails
alone" quotes it.

Opens the embedded engine with ``max_server_memory_usage`` = ``limit_mb`` and runs, for
``rounds`` rounds, one heavy query (an exact count of distinct events over every stored event,
whose hash set outgrows the limit) beside a loop of small report queries (top paths with their
distinct visitors) and a loop of 200,000-row INSERTs into a scratch table. The heavy query runs
with no cap of its own (``cap_mb`` 0), or under ``max_memory_usage`` = ``cap_mb``, as Tally's
report lane runs every report query (``TALLY_REPORT_MEMORY_MB``). Prints, per round, how the heavy
query ended and how many small queries and INSERTs succeeded and failed.

Usage: PYTHONPATH=service:. python scripts/engine_memory.py <folder> <limit_mb> <cap_mb> [rounds]"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import chdb
import clickhouse_connect

HEAVY = (
    "SELECT uniqExact(toString(event_id), path, referrer) FROM tally.events FORMAT Null "
    "SETTINGS max_threads = 2, max_memory_usage = {cap}"
)
SMALL = (
    "SELECT path, count(), uniqExact(visitor_hash) FROM tally.events "
    "GROUP BY path ORDER BY 2 DESC LIMIT 10"
)
INSERT = "INSERT INTO engine_memory.t SELECT number, repeat('x', 100) FROM numbers(200000)"


def failure(exc: Exception) -> str:
    text = str(exc)
    if "(total) memory limit" in text:
        return "the engine's limit"
    if "Query memory limit" in text:
        return "its own cap"
    return text[:80]


def round_once(dsn: str, cap: int) -> str:
    done = threading.Event()
    heavy: list[str] = []
    counts = {"small": [0, 0], "insert": [0, 0]}

    def run_heavy() -> None:
        client = clickhouse_connect.get_client(dsn=dsn)
        started = time.perf_counter()
        try:
            client.command(HEAVY.format(cap=cap))
            heavy.append(f"ok in {time.perf_counter() - started:.1f} s")
        except Exception as exc:  # the outcome is what is measured
            heavy.append(f"failed ({failure(exc)}) in {time.perf_counter() - started:.1f} s")
        done.set()

    def loop(kind: str, sql: str, pause: float) -> None:
        client = clickhouse_connect.get_client(dsn=dsn)
        while not done.is_set():
            try:
                client.command(sql)
                counts[kind][0] += 1
            except Exception:  # counted
                counts[kind][1] += 1
            time.sleep(pause)

    threads = [
        threading.Thread(target=run_heavy),
        threading.Thread(target=loop, args=("small", SMALL, 0.0)),
        threading.Thread(target=loop, args=("insert", INSERT, 0.2)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    (small_ok, small_failed), (ins_ok, ins_failed) = counts["small"], counts["insert"]
    return (
        f"heavy {heavy[0]}; small queries {small_ok} ok, {small_failed} failed; "
        f"INSERTs {ins_ok} ok, {ins_failed} failed"
    )


def main() -> None:
    folder = Path(sys.argv[1]).resolve() / "clickhouse"
    limit, cap = int(sys.argv[2]) * 2**20, int(sys.argv[3]) * 2**20
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    # The first connection sets the engine's server settings for the whole process.
    engine = chdb.connect(f"{folder}?max_server_memory_usage={limit}")
    dsn = f"chdb://{folder}"
    engine.query("CREATE DATABASE IF NOT EXISTS engine_memory")
    engine.query(
        "CREATE TABLE IF NOT EXISTS engine_memory.t (a UInt64, s String) "
        "ENGINE = MergeTree ORDER BY a"
    )
    print(f"engine limit {sys.argv[2]} MiB, heavy query cap {sys.argv[3] or 0} MiB (0: none)")
    try:
        for n in range(rounds):
            print(f"round {n + 1}: {round_once(dsn, cap)}", flush=True)
    finally:
        engine.query("DROP DATABASE IF EXISTS engine_memory")


if __name__ == "__main__":
    main()

"""One-off: load a 10M-event tenant (benchmarks/generate.py's events, with the issue-16 columns
the generator computes: source, channel, utm_*, country, a few percent bots) into a chDB data dir
of its own, and wait for merges. Not part of the package.
Usage: PYTHONPATH=.:scripts python scripts/speed_load.py .bench-data/chdb 10000000"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from benchmarks.generate import generate, settle_merges

from tally.storage.client import Storage, parse_url
from tally.storage.migrate import migrate
from tally.storage.projects import ProjectStore


def main() -> None:
    folder, events = Path(sys.argv[1]).resolve(), int(sys.argv[2])
    storage = Storage(parse_url(f"chdb://{folder}"), pool_size=2)
    migrate(storage)
    store = ProjectStore(storage)
    tenant, _, _ = store.create_project("bench", f"tenant {events}")
    t = time.perf_counter()
    generate(storage, tenant.id, events, seed=1)
    neighbour, _, _ = store.create_project("bench-n", "neighbour")
    generate(storage, neighbour.id, events // 10, seed=2)
    print("loaded", time.perf_counter() - t, flush=True)
    print("settled", settle_merges(storage), flush=True)
    (folder.parent / "project.txt").write_text(tenant.id)
    print(
        storage.query("SELECT count(), uniqExact(session_id), countIf(is_bot=1) FROM tally.events")
    )
    print(
        storage.query(
            "SELECT source, count() FROM tally.events GROUP BY source ORDER BY 2 DESC LIMIT 5"
        )
    )
    storage.close()


if __name__ == "__main__":
    main()

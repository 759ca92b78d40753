"""One-off: load a 10M-event tenant (benchmarks/generate.py's events, plus the issue-16 columns:
source, channel, utm_*, country, a few percent bots) into a chDB data dir of its own, and wait
for merges. Not part of the package.
Usage: PYTHONPATH=.:scripts python scripts/speed_load.py .bench-data/chdb 10000000"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from benchmarks.generate import generate, insert_sql, settle_merges

from tally.storage.client import Storage, parse_url
from tally.storage.migrate import migrate
from tally.storage.projects import ProjectStore

SOURCES = ["Direct / None"] * 40 + ["Google"] * 30 + ["Bing"] * 4 + ["Twitter"] * 5
SOURCES += ["Facebook"] * 5 + ["news.example.org"] * 3 + ["newsletter"] * 4 + ["ref.example"] * 9
CHANNEL = {
    "Direct / None": "Direct",
    "Google": "Organic Search",
    "Bing": "Organic Search",
    "Twitter": "Organic Social",
    "Facebook": "Organic Social",
    "news.example.org": "Referral",
    "newsletter": "Email",
    "ref.example": "Referral",
}
COUNTRIES = ["US"] * 30 + ["DE"] * 10 + ["GB"] * 8 + ["FR"] * 6 + ["IN"] * 8 + ["BR"] * 5
COUNTRIES += ["JP"] * 4 + ["NP"] * 2 + ["CA"] * 4 + ["AT"] * 2 + ["NL"] * 3 + ["Unknown"] * 2
COUNTRIES += [
    c for c in ("ES", "IT", "PL", "SE", "AU", "MX", "KR", "CN", "RU", "TR") for _ in (1, 2)
]


def arr(values: list[str]) -> str:
    return "[" + ", ".join(repr(v) for v in values) + "]"


def patched(database: str) -> str:
    sql = insert_sql(database)
    sql = sql.replace(
        "ip, user_agent, key_id)",
        "ip, user_agent, key_id, source, channel, utm_source, utm_medium, utm_campaign,"
        " country, is_bot)",
    )
    src = f"{arr(SOURCES)}[1 + bitShiftRight(h2, 40) % {len(SOURCES)}]"
    chan = f"transform(sess_source, {arr(list(CHANNEL))}, {arr(list(CHANNEL.values()))}, 'Other')"
    extra = f""",
    if(pos = 0, sess_source, 'Direct / None'),
    if(pos = 0, {chan}, 'Direct'),
    if(pos = 0 AND sess_source = 'newsletter', 'newsletter', ''),
    if(pos = 0 AND sess_source = 'newsletter', 'email', ''),
    if(pos = 0 AND sess_source = 'newsletter', concat('week', toString(h2 % 13)), ''),
    {arr(COUNTRIES)}[1 + bitShiftRight(h1, 36) % {len(COUNTRIES)}],
    toUInt8(bitShiftRight(h1, 44) % 100 < 3)
FROM numbers"""
    sql = sql.replace("\nFROM numbers", extra, 1)
    sql = sql.replace("SELECT\n    {project:String}", "SELECT\n    {project:String}", 1)
    return sql.replace("AS event_name\n", f"AS event_name,\n    {src} AS sess_source\n", 1)


def main() -> None:
    folder, events = Path(sys.argv[1]).resolve(), int(sys.argv[2])
    storage = Storage(parse_url(f"chdb://{folder}"), pool_size=2)
    migrate(storage)
    store = ProjectStore(storage)
    tenant, _, _ = store.create_project("bench", f"tenant {events}")
    import benchmarks.generate as g

    g.insert_sql = patched  # type: ignore[assignment]
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

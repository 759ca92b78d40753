"""A realistic, deterministic event generator that loads straight into ClickHouse.

Events are computed by ClickHouse itself from ``numbers()`` with hash functions of (seed, row), so
the same seed gives the same events, and millions load in seconds through the real ``events``
table and its materialized views (no HTTP). The shape:

- sessions of 6 events: 1 to 4 pageviews (a quarter of sessions bounce), custom events
  (signup/click/purchase/search) and a ``session_end``, 5 to 90 s apart; half the session_ends
  state ``metadata.durationMs``;
- visitors return: each has about three sessions, on different days;
- paths and referrers are Zipf-like (log-uniform ranks: a few are very popular, a long tail is not);
  half of the pageviews have no referrer;
- browsers and device types in realistic proportions; a diurnal pattern (busy afternoons, quiet
  nights); sessions spread over the last 100 days.

Usage: ``python -m benchmarks.generate --url chdb:///path --project ID --events N [--seed S]``.
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime

from tally.storage.client import Storage, parse_url
from tally.storage.writer import INSERT_SETTINGS

EVENTS_PER_SESSION = 6
DAYS = 100
PATHS = 5000
REFERRERS = 500
CHUNK = 2_000_000

# Hour-of-day weights (UTC): each hour appears as many times as its weight.
HOURS = [
    h
    for h, w in enumerate([1, 1, 1, 1, 1, 2, 3, 4, 5, 6, 6, 6, 7, 8, 8, 8, 8, 7, 6, 5, 4, 3, 2, 1])
    for _ in range(w)
]
BROWSERS = (
    ["Chrome"] * 60
    + ["Mobile Safari"] * 18
    + ["Safari"] * 8
    + ["Firefox"] * 6
    + ["Edge"] * 5
    + ["Samsung Internet"] * 3
)
DEVICES = ["desktop"] * 55 + ["mobile"] * 40 + ["tablet"] * 5
CUSTOM = ["signup", "click", "purchase", "search"]


def _sql_array(values: list[object]) -> str:
    return "[" + ", ".join(repr(v) if isinstance(v, str) else str(v) for v in values) + "]"


def insert_sql(database: str) -> str:
    """One INSERT ... SELECT that generates events for rows [start, start + count)."""
    # h(k): a deterministic 64-bit hash of (seed, session, k); u(k): the same in [0, 1).
    return f"""
INSERT INTO {database}.events
    (project_id, name, occurred_at, received_at, path, url, referrer, session_id, visitor_id,
     browser, os, device_type, duration_ms, metadata, ip, user_agent, key_id)
WITH
    {{seed:UInt64}} AS seed,
    intDiv(number, {EVENTS_PER_SESSION}) AS s,
    number % {EVENTS_PER_SESSION} AS pos,
    sipHash64(seed, s, 1) AS h1,
    sipHash64(seed, s, 2) AS h2,
    sipHash64(seed, number, 3) AS h3,
    sipHash64(seed, number, 4) AS h4,
    h3 / 18446744073709551616. AS u3,
    h4 / 18446744073709551616. AS u4,
    1 + h1 % 4 AS pageviews,
    intDiv({{sessions:UInt64}}, 3) + 1 AS visitors,
    {_sql_array(HOURS)} AS hours,
    {_sql_array(BROWSERS)} AS browsers,
    {_sql_array(DEVICES)} AS devices,
    {_sql_array(CUSTOM)} AS custom,
    toDateTime64({{now:DateTime64(3, 'UTC')}}, 3, 'UTC') AS now_,
    toStartOfDay(now_) - toIntervalDay(h2 % {DAYS})
        + toIntervalHour(hours[1 + bitShiftRight(h1, 8) % length(hours)])
        + toIntervalSecond(bitShiftRight(h2, 16) % 3600) AS session_start,
    least(now_, session_start + toIntervalSecond(pos * (5 + bitShiftRight(h3, 32) % 85))) AS at,
    multiIf(pos < pageviews, 'pageview', pos = {EVENTS_PER_SESSION - 1}, 'session_end',
            custom[1 + h3 % length(custom)]) AS event_name
SELECT
    {{project:String}},
    event_name,
    at,
    at,
    if(event_name = 'pageview', concat('/page/', toString(toUInt32(pow({PATHS}, u3)))), ''),
    if(event_name = 'pageview',
       concat('https://site.example/page/', toString(toUInt32(pow({PATHS}, u3)))), ''),
    if(event_name = 'pageview' AND u4 < 0.5,
       concat('https://ref', toString(toUInt32(pow({REFERRERS}, u4 * 2))), '.example/'), ''),
    concat('s', toString(s)),
    concat('v', toString(sipHash64(seed, h1 % visitors))),
    browsers[1 + bitShiftRight(h1, 20) % length(browsers)],
    'Other',
    devices[1 + bitShiftRight(h1, 28) % length(devices)],
    if(event_name = 'session_end' AND h3 % 2 = 0, toNullable(toFloat64(h3 % 600000)), NULL),
    '{{}}',
    '127.0.0.1',
    'benchmark',
    'generator'
FROM numbers({{start:UInt64}}, {{count:UInt64}})
"""


def generate(
    storage: Storage, project_id: str, events: int, seed: int = 1, now: datetime | None = None
) -> float:
    """Load ``events`` events for ``project_id``; return the seconds it took."""
    started = time.perf_counter()
    now = now or datetime.now(UTC)
    sessions = max(1, events // EVENTS_PER_SESSION)
    sql = insert_sql(storage.database)
    settings = {**INSERT_SETTINGS, "insert_deduplicate": 0}
    for start in range(0, events, CHUNK):
        params = {
            "seed": seed,
            "sessions": sessions,
            "now": now,
            "project": project_id,
            "start": start,
            "count": min(CHUNK, events - start),
        }
        with storage.client() as client:
            client.command(sql, parameters=params, settings=settings)
    return time.perf_counter() - started


def settle_merges(storage: Storage, quiet_seconds: float = 3.0, timeout: float = 1800.0) -> float:
    """Wait until no background merge has run in this database for ``quiet_seconds``; return the
    seconds it took.

    A bulk load writes in a minute what a tenant sends over 90 days, and the engine then spends a
    while merging the parts it left. A real tenant's tables are merged as its events arrive, so
    timings taken during that burst would measure the merges, not the dashboard."""
    started = time.perf_counter()
    quiet_since = started
    sql = "SELECT count() FROM system.merges WHERE database = {db:String}"
    while True:
        now = time.perf_counter()
        if storage.query(sql, {"db": storage.database})[0][0]:
            quiet_since = now
        elif now - quiet_since >= quiet_seconds:
            return now - started
        if now - started > timeout:
            raise TimeoutError(f"background merges still running after {timeout:.0f} s")
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True, help="ClickHouse URL (chdb:///path or http://...)")
    parser.add_argument("--project", required=True)
    parser.add_argument("--events", type=int, required=True)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    storage = Storage(parse_url(args.url), pool_size=1)
    try:
        seconds = generate(storage, args.project, args.events, args.seed)
        settled = settle_merges(storage)
    finally:
        storage.close()
    print(f"generated {args.events} events in {seconds:.1f} s; merges settled in {settled:.1f} s")


if __name__ == "__main__":
    main()

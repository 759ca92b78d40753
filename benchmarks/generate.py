"""A realistic, deterministic event generator that loads straight into ClickHouse.

Events are computed by ClickHouse itself from ``numbers()`` with hash functions of (seed, row), so
the same seed gives the same events, and millions load in seconds through the real ``events``
table and its materialized views (no HTTP). The shape:

- sessions of 6 events: 1 to 4 pageviews (a quarter of sessions bounce), custom events
  (signup/click/purchase/search) and a ``session_end``, each 0-60 s after the slot of the one
  before (events of a session never tie in time); half the session_ends state
  ``metadata.durationMs``;
- visitors return: each has about three sessions, on different days, from one IP (so one
  country);
- paths are Zipf-like (log-uniform ranks: a few are very popular, a long tail is not);
- acquisition: a session's first pageview (its landing) carries what a visit brings: UTM-tagged
  landings (google/cpc, newsletter/email, facebook/paid-social, ...), Google Ads auto-tagging
  (``gclid``), referrers of known engines and networks (google.com, google.de, bing, duckduckgo,
  t.co, facebook, reddit, Hacker News, news sites, ...), a Zipf-like long tail of 500 other sites,
  or nothing (direct); the tracker sends the referrer on a session's first pageview only;
- client IPs: real public addresses that the shipped DB-IP database places in 23 countries (and a
  private one it cannot place: ``Unknown``), in realistic shares;
- User-Agents of real browsers in realistic shares, about 3% crawlers and monitors (Googlebot,
  bingbot, AhrefsBot, GPTBot, HeadlessChrome, UptimeRobot) and about 1% HTTP libraries (curl,
  python-requests: not bots);
- a diurnal pattern (busy afternoons, quiet nights); sessions spread over the last 100 days.

The stored dimension columns (``browser``, ``os``, ``device_type``, ``source``, ``channel``,
``utm_*``, ``country``, ``is_bot``) are computed in Python by the same domain functions collect
uses at ingestion (``tally.domain.useragent``, ``acquisition``, ``geo``, ``bots``), once per
distinct input of the palettes below, and passed to the INSERT as array parameters that each row
indexes: generating 10M events costs no more Python than generating 1,000.

Usage: ``python -m benchmarks.generate --url chdb:///path --project ID --events N [--seed S]``.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from tally.storage.client import Storage, parse_url
from tally.storage.migrate import migrate
from tally.storage.writer import INSERT_SETTINGS

from .common import positive

EVENTS_PER_SESSION = 6
DAYS = 100
PATHS = 5000
REFERRERS = 500  # the long tail: ref1.example ... ref499.example, Zipf-like
CHUNK = 2_000_000
SITE = "https://site.example"
SLOT_SECONDS = 60  # event k of a session falls in [k, k + 1) slots after its start

# Hour-of-day weights (UTC): each hour appears as many times as its weight.
HOURS = [
    h
    for h, w in enumerate([1, 1, 1, 1, 1, 2, 3, 4, 5, 6, 6, 6, 7, 8, 8, 8, 8, 7, 6, 5, 4, 3, 2, 1])
    for _ in range(w)
]
CUSTOM = ["signup", "click", "purchase", "search"]

# (weight per 1000 visitors, User-Agent). Browser, OS, device type and is_bot come from Tally's
# own parser and bot rule, as at collect.
_WIN = "Mozilla/5.0 (Windows NT 10.0; Win64; x64)"
_MAC = "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7)"
_WEBKIT = "AppleWebKit/537.36 (KHTML, like Gecko)"
_IOS = "AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.6 Mobile/15E148 Safari/604.1"
USER_AGENTS: list[tuple[int, str]] = [
    (300, f"{_WIN} {_WEBKIT} Chrome/130.0.0.0 Safari/537.36"),
    (80, f"{_MAC} {_WEBKIT} Chrome/130.0.0.0 Safari/537.36"),
    (
        170,
        f"Mozilla/5.0 (Linux; Android 14; Pixel 8) {_WEBKIT} Chrome/130.0.0.0 Mobile Safari/537.36",
    ),
    (160, f"Mozilla/5.0 (iPhone; CPU iPhone OS 17_6 like Mac OS X) {_IOS}"),
    (70, f"{_MAC} AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.6 Safari/605.1.15"),
    (50, f"{_WIN.replace(')', '; rv:132.0)')} Gecko/20100101 Firefox/132.0"),
    (50, f"{_WIN} {_WEBKIT} Chrome/130.0.0.0 Safari/537.36 Edg/130.0.0.0"),
    (
        30,
        f"Mozilla/5.0 (Linux; Android 14; SAMSUNG SM-S918B) {_WEBKIT} SamsungBrowser/26.0 "
        "Chrome/122.0.0.0 Mobile Safari/537.36",
    ),
    (30, f"Mozilla/5.0 (iPad; CPU OS 17_6 like Mac OS X) {_IOS}"),
    (20, "Mozilla/5.0 (X11; Linux x86_64; rv:132.0) Gecko/20100101 Firefox/132.0"),
    # crawlers, monitors and a headless browser: bots, left out of every number by default
    (10, "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"),
    (5, "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)"),
    (5, "Mozilla/5.0 (compatible; AhrefsBot/7.0; +http://ahrefs.com/robot/)"),
    (4, f"Mozilla/5.0 {_WEBKIT[:-1]}; compatible; GPTBot/1.2; +https://openai.com/gptbot)"),
    (3, f"Mozilla/5.0 (X11; Linux x86_64) {_WEBKIT} HeadlessChrome/130.0.0.0 Safari/537.36"),
    (3, "Mozilla/5.0+(compatible; UptimeRobot/2.0; http://www.uptimerobot.com/)"),
    # server-side senders: not bots, their events count
    (5, "curl/8.5.0"),
    (5, "python-requests/2.32.3"),
]

# (weight per 1000 visitors, client IP): public addresses DB-IP's country lite places in these
# countries (checked by the tests through the shipped database), and one it cannot place.
CLIENT_IPS: list[tuple[int, str]] = [
    (150, "3.17.10.20"),
    (100, "2.1.10.20"),
    (50, "3.129.10.20"),  # US
    (70, "2.161.10.20"),
    (40, "3.65.10.20"),  # DE
    (50, "2.97.10.20"),
    (30, "3.33.10.20"),  # GB
    (80, "14.97.10.20"),  # IN
    (50, "31.33.10.20"),  # FR
    (40, "3.97.10.20"),  # CA
    (40, "45.225.10.20"),  # BR
    (30, "31.161.10.20"),  # NL
    (30, "1.33.10.20"),  # JP
    (30, "5.225.10.20"),  # ES
    (30, "2.33.10.20"),  # IT
    (20, "37.225.10.20"),  # PL
    (20, "1.17.10.20"),  # AU
    (20, "2.65.10.20"),  # SE
    (15, "2.17.10.20"),  # CH
    (15, "83.65.10.20"),  # AT
    (20, "3.161.10.20"),  # MX
    (15, "1.97.10.20"),  # KR
    (10, "41.1.10.20"),  # ZA
    (20, "36.65.10.20"),  # ID
    (10, "46.1.10.20"),  # TR
    (10, "5.1.10.20"),  # UA
    (10, "38.17.10.20"),  # AR
    (15, "10.1.2.3"),  # private: Unknown
]

# (weight per 1000 sessions, landing url query, referrer) of a session's first pageview. The
# weight of the long tail of other sites (ref<k>.example, Zipf-like) is TAIL_WEIGHT.
_G, _GC = "https://www.google.com/", "utm_source=google&utm_medium=cpc&utm_campaign="
LANDINGS: list[tuple[int, str, str]] = [
    (300, "", ""),  # direct
    (130, "", _G),
    (35, "", "https://www.google.de/"),
    (25, "", "https://www.google.co.uk/"),
    (15, "", "https://www.google.fr/"),
    (40, "", "https://www.bing.com/"),
    (25, "", "https://duckduckgo.com/"),
    (8, "", "https://yandex.ru/"),
    (7, "", "https://www.ecosia.org/"),
    (25, "", "https://t.co/x8Kf2LwQ"),
    (25, "", "https://www.facebook.com/"),
    (10, "", "https://l.facebook.com/"),
    (20, "", "https://www.reddit.com/r/programming/"),
    (10, "", "https://www.linkedin.com/"),
    (15, "", "https://news.ycombinator.com/"),
    (10, "", "https://www.youtube.com/"),
    (5, "", "https://www.instagram.com/"),
    (10, "", "https://github.com/"),
    (8, "", "https://stackoverflow.com/"),
    (8, "", "https://www.theguardian.com/technology"),
    (6, "", "https://www.nytimes.com/"),
    (6, "", "https://www.spiegel.de/netzwelt/"),
    (5, "", "https://www.lemonde.fr/"),
    (5, "", "https://site.example/page/1"),  # the site's own page: not an acquisition
    (30, f"{_GC}brand_search&utm_term=tally+analytics", _G),
    (20, f"{_GC}generic_search&utm_term=web+analytics", _G),
    (15, "gclid=Cj0KCQiA2KitBhCIARIsAPPMEhJ", _G),
    (
        25,
        "utm_source=newsletter&utm_medium=email&utm_campaign=2026-11-weekly&utm_content=header",
        "",
    ),
    (
        15,
        "utm_source=newsletter&utm_medium=email&utm_campaign=2026-11-weekly&utm_content=footer",
        "",
    ),
    (
        20,
        "utm_source=facebook&utm_medium=paid-social&utm_campaign=black_friday&utm_content=video_a",
        "https://l.facebook.com/",
    ),
    (
        10,
        "utm_source=facebook&utm_medium=paid-social&utm_campaign=black_friday&utm_content=carousel",
        "https://m.facebook.com/",
    ),
    (10, "utm_source=twitter&utm_medium=social&utm_campaign=launch", "https://t.co/aZ31kq"),
    (8, "utm_source=bing&utm_medium=cpc&utm_campaign=brand_search", "https://www.bing.com/"),
    (
        6,
        "utm_source=partner&utm_medium=affiliate&utm_campaign=spring",
        "https://partner-blog.example/",
    ),
    (5, "utm_source=youtube&utm_medium=video&utm_campaign=tutorial", "https://www.youtube.com/"),
    (
        5,
        "utm_source=linkedin&utm_medium=paid_social&utm_campaign=hiring",
        "https://www.linkedin.com/",
    ),
    (5, "utm_source=adnetwork&utm_medium=display&utm_campaign=retarget", ""),
]
TAIL_WEIGHT = 48

# Column order of the generated rows (schema 004's columns, then those schema 005 added).
COLUMNS_BEFORE_005 = (
    "project_id", "name", "occurred_at", "received_at", "path", "url", "referrer", "session_id",
    "visitor_id", "browser", "os", "device_type", "duration_ms", "metadata", "ip", "user_agent",
    "key_id",
)  # fmt: skip
DIMENSION_COLUMNS = (
    "source", "channel", "utm_source", "utm_medium", "utm_campaign", "utm_content", "utm_term",
    "country", "is_bot",
)  # fmt: skip


def _picks(weights: list[int], first: int = 1) -> list[int]:
    """1-based indices, each repeated by its weight: a uniform pick is a weighted pick."""
    return [i for i, w in enumerate(weights, start=first) for _ in range(w)]


@dataclass(frozen=True)
class Palettes:
    """Every distinct input of the generator with the dimensions Tally computes from it."""

    params: dict[str, Any]
    tail_start: int  # index of the first long-tail landing
    rest_pageview: int  # index of the acquisition of a later pageview (no query, no referrer)
    rest_other: int  # index of the acquisition of an event without url or referrer


@lru_cache(maxsize=1)
def palettes() -> Palettes:
    from tally.domain.acquisition import acquire
    from tally.domain.bots import client_of
    from tally.domain.geo import CountryReader

    described = [client_of(ua) for _, ua in USER_AGENTS]
    clients = [client for client, _ in described]
    reader = CountryReader()
    try:
        countries = [reader.country(ip) for _, ip in CLIENT_IPS]
    finally:
        reader.close()
    landings = [(query, referrer) for _, query, referrer in LANDINGS]
    tail_start = len(landings) + 1
    landings += [("", f"https://ref{k}.example/") for k in range(1, REFERRERS)]
    # What the tracker sends after the landing: later pageviews without query or referrer, and
    # custom events and session_end without url or referrer.
    rest_pageview = len(landings) + 1
    landings += [("", "")]
    rest_other = len(landings) + 1
    acquisitions = [acquire(f"{SITE}/page/1" + (f"?{q}" if q else ""), r) for q, r in landings]
    acquisitions.append(acquire("", ""))
    params: dict[str, Any] = {
        "ua": [ua for _, ua in USER_AGENTS],
        "ua_browser": [c.browser for c in clients],
        "ua_os": [c.os for c in clients],
        "ua_device": [c.device_type for c in clients],
        "ua_bot": [bot for _, bot in described],
        "ua_pick": _picks([w for w, _ in USER_AGENTS]),
        "ip": [ip for _, ip in CLIENT_IPS],
        "ip_country": countries,
        "ip_pick": _picks([w for w, _ in CLIENT_IPS]),
        "l_query": [q for q, _ in landings] + [""],
        "l_referrer": [r for _, r in landings] + [""],
        "l_pick": _picks([w for w, _, _ in LANDINGS]) + [0] * TAIL_WEIGHT,
    }
    for i, column in enumerate(DIMENSION_COLUMNS[:7]):
        params[f"a_{column}"] = [a[i] for a in acquisitions]
    return Palettes(params, tail_start, rest_pageview, rest_other)


def insert_sql(database: str, dimensions: bool = True) -> str:
    """One INSERT ... SELECT that generates events for rows [start, start + count); without
    ``dimensions``, only the columns of schema 004 (a table from before schema 005)."""
    p = palettes()
    columns = COLUMNS_BEFORE_005 + (DIMENSION_COLUMNS if dimensions else ())
    dimension_values = """,
    {a_source:Array(String)}[ai],
    {a_channel:Array(String)}[ai],
    {a_utm_source:Array(String)}[ai],
    {a_utm_medium:Array(String)}[ai],
    {a_utm_campaign:Array(String)}[ai],
    {a_utm_content:Array(String)}[ai],
    {a_utm_term:Array(String)}[ai],
    {ip_country:Array(String)}[ii],
    {ua_bot:Array(UInt8)}[ui]"""
    # h(k): a deterministic 64-bit hash of (seed, session, k); u(k): the same in [0, 1).
    return f"""
INSERT INTO {database}.events ({", ".join(columns)})
WITH
    {{seed:UInt64}} AS seed,
    intDiv(number, {EVENTS_PER_SESSION}) AS s,
    number % {EVENTS_PER_SESSION} AS pos,
    sipHash64(seed, s, 1) AS h1,
    sipHash64(seed, s, 2) AS h2,
    sipHash64(seed, number, 3) AS h3,
    sipHash64(seed, number, 4) AS h4,
    sipHash64(seed, s, 5) / 18446744073709551616. AS u5,
    h3 / 18446744073709551616. AS u3,
    1 + h1 % 4 AS pageviews,
    intDiv({{sessions:UInt64}}, 3) + 1 AS visitors,
    h1 % visitors AS visitor,
    sipHash64(seed, visitor, 6) AS hv,
    {HOURS} AS hours,
    {CUSTOM} AS custom,
    {{ua_pick:Array(UInt16)}} AS ua_pick,
    {{ip_pick:Array(UInt16)}} AS ip_pick,
    {{l_pick:Array(UInt16)}} AS l_pick,
    ua_pick[1 + bitShiftRight(hv, 20) % length(ua_pick)] AS ui,
    ip_pick[1 + bitShiftRight(hv, 40) % length(ip_pick)] AS ii,
    l_pick[1 + bitShiftRight(h2, 24) % length(l_pick)] AS landing_pick,
    if(landing_pick = 0,
       toUInt32({p.tail_start - 1} + toUInt32(pow({REFERRERS}, u5))), landing_pick) AS landing,
    toDateTime64({{now:DateTime64(3, 'UTC')}}, 3, 'UTC') AS now_,
    toStartOfDay(now_) - toIntervalDay(h2 % {DAYS})
        + toIntervalHour(hours[1 + bitShiftRight(h1, 8) % length(hours)])
        + toIntervalSecond(bitShiftRight(h2, 16) % 3600) AS planned_start,
    -- a session that would end after now happened a day earlier: no event in the future
    if(planned_start > now_ - toIntervalSecond({EVENTS_PER_SESSION * SLOT_SECONDS}),
       planned_start - toIntervalDay(1), planned_start) AS session_start,
    session_start + toIntervalSecond(pos * {SLOT_SECONDS} + (bitShiftRight(h3, 32) % {SLOT_SECONDS})
        * (pos > 0)) AS at,
    multiIf(pos < pageviews, 'pageview', pos = {EVENTS_PER_SESSION - 1}, 'session_end',
            custom[1 + h3 % length(custom)]) AS event_name,
    concat('/page/', toString(toUInt32(pow({PATHS}, u3)))) AS page,
    {{l_query:Array(String)}}[landing] AS landing_query,
    multiIf(pos = 0, landing, event_name = 'pageview', {p.rest_pageview}, {p.rest_other}) AS ai
SELECT
    {{project:String}},
    event_name,
    at,
    at,
    if(event_name = 'pageview', page, ''),
    if(event_name = 'pageview',
       concat('{SITE}', page, if(pos = 0 AND landing_query != '', concat('?', landing_query), '')),
       ''),
    if(pos = 0, {{l_referrer:Array(String)}}[landing], ''),
    concat('s', toString(s)),
    concat('v', toString(sipHash64(seed, visitor))),
    {{ua_browser:Array(String)}}[ui],
    {{ua_os:Array(String)}}[ui],
    {{ua_device:Array(String)}}[ui],
    if(event_name = 'session_end' AND h3 % 2 = 0, toNullable(toFloat64(h3 % 600000)), NULL),
    '{{}}',
    {{ip:Array(String)}}[ii],
    {{ua:Array(String)}}[ui],
    'generator'{dimension_values if dimensions else ""}
FROM numbers({{start:UInt64}}, {{count:UInt64}})
"""


def generate(
    storage: Storage,
    project_id: str,
    events: int,
    seed: int = 1,
    now: datetime | None = None,
    dimensions: bool = True,
) -> float:
    """Load ``events`` events for ``project_id``; return the seconds it took. Without
    ``dimensions`` the INSERT names only schema 004's columns (for a table from before 005)."""
    started = time.perf_counter()
    now = now or datetime.now(UTC)
    sessions = max(1, events // EVENTS_PER_SESSION)
    sql = insert_sql(storage.database, dimensions)
    settings = {**INSERT_SETTINGS, "insert_deduplicate": 0}
    for start in range(0, events, CHUNK):
        params = {
            **palettes().params,
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.generate", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--url", required=True, help="ClickHouse URL (chdb:///path or http://...)")
    parser.add_argument("--project", required=True)
    parser.add_argument("--events", type=positive, required=True, help="at least 1")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    storage = Storage(parse_url(args.url), pool_size=1)
    try:
        migrate(storage)  # a fresh engine has no tables yet
        seconds = generate(storage, args.project, args.events, args.seed)
        settled = settle_merges(storage)
    finally:
        storage.close()
    print(f"generated {args.events} events in {seconds:.1f} s; merges settled in {settled:.1f} s")


if __name__ == "__main__":
    main()

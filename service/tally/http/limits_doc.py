"""Every limit and default of the API, in one table: the README and the OpenAPI document both
show :func:`markdown` (tests/test_limits_doc.py checks the README holds it verbatim)."""

from __future__ import annotations

from ..config import Settings
from ..domain.events import MAX_USER_AGENT
from ..domain.filters import MAX_FILTERS, MAX_VALUE_LENGTH, MAX_VALUES
from ..domain.metrics import MAX_DAYS
from ..domain.ranges import MAX_DATE, MAX_RANGE_DAYS, MIN_DATE
from ..domain.stats_v2 import MAX_DIMENSIONS as V2_MAX_DIMENSIONS
from ..domain.stats_v2 import MAX_LIMIT as V2_MAX_LIMIT
from ..domain.stats_v2 import MAX_OFFSET as V2_MAX_OFFSET
from ..query.breakdown import DEFAULT_LIMIT as BREAKDOWN_DEFAULT_LIMIT
from ..query.breakdown import MAX_LIMIT as BREAKDOWN_MAX_LIMIT
from .limits import MAX_FILTERS_BYTES, MAX_TARGET_BYTES, SMALL_BODY_BYTES, small_cap

DEFAULT_DAYS = 14  # the API's default window (GET /api/dashboard)
PAGE_DAYS = 7  # the window the dashboard page opens on (web/app.js DEFAULT_DAYS)
LARGEST_VALID_BATCH = 6_737_612  # bytes; built and sent by tests/test_limits.py


def size(n: int) -> str:
    """A number of bytes as people read it: ``7,340,032 bytes (7 MiB)``, ``64 KiB``,
    ``123,456 bytes (about 120.6 KiB)``, ``1,000 bytes``."""
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            whole, rest = divmod(n, scale)
            if rest == 0 and scale == 2**10:
                return f"{whole} {unit}"
            amount = f"{whole}" if rest == 0 else f"about {n / scale:.1f}"
            return f"{n:,} bytes ({amount} {unit})"
    return f"{n:,} bytes"


def _body(cap: int) -> str:
    """The request body row: collect's cap and the other endpoints', as ``cap`` makes them."""
    batch = (
        f"the largest valid batch (100 events at every maximum) is {LARGEST_VALID_BATCH:,} bytes"
    )
    others = small_cap(cap)
    if cap == Settings().max_body_bytes:
        return (
            f"`TALLY_MAX_BODY_BYTES`, default {size(cap)} on collect (0: no cap): {batch}; "
            f"{size(SMALL_BODY_BYTES)} on the other endpoints, or `TALLY_MAX_BODY_BYTES` if "
            "lower; 413 beyond"
        )
    if cap == 0:
        collect = f"`TALLY_MAX_BODY_BYTES` set to 0: no cap on collect, where {batch}"
    else:
        collect = f"`TALLY_MAX_BODY_BYTES` set to {size(cap)} on collect, where {batch}"
    if others < SMALL_BODY_BYTES:
        rest = f"{size(others)} on the other endpoints too (the setting, lower than their 64 KiB)"
    else:
        rest = f"{size(others)} on the other endpoints"
    return f"{collect}; {rest}; 413 beyond"


def _rate(value: str) -> str:
    """A rate limit setting as the table says it: ``100/second``; empty is no limit."""
    return value.strip() or "empty, so no limit"


def _oldest(days: int) -> str:
    """The retention's oldest day, as configured (an importer learns how far back it may go)."""
    why = "ClickHouse's TTL would drop it as it is written"
    if days > 0:
        return (
            f"`TALLY_RETENTION_DAYS` is {days}: one of a UTC day before today minus {days} days "
            f"is refused (`is older than the {days} days this Tally keeps events`: {why})"
        )
    return (
        "with `TALLY_RETENTION_DAYS=N` (default 0: every day kept), one of a UTC day before "
        f"today minus N days is refused (`is older than the N days this Tally keeps events`: {why})"
    )


def _beyond(*limits: str) -> str:
    """ "; 429 beyond" when one of the rate limits is set (none set: nothing is refused)."""
    return "; 429 beyond" if any(limit.strip() for limit in limits) else ""


def rows(settings: Settings | None = None) -> list[tuple[str, str]]:
    s = settings or Settings()
    return [
        (
            "project `name`",
            "required, 2–60 characters once surrounding whitespace is trimmed (at most 200 with "
            "it); no control characters, not only invisible ones (spaces, U+200B and other format "
            "characters, combining marks alone, Hangul fillers)",
        ),
        (
            "key `label`",
            "optional, 1–60 characters once trimmed (at most 200 with the whitespace), the same "
            "characters as a name; default "
            "`Untitled` (a project's first key: `Default`)",
        ),
        ("`projectId`, `keyId`", "24 lowercase hex characters"),
        (
            "`days` (dashboard)",
            f"an integer 1–{MAX_DAYS}; default {DEFAULT_DAYS} in the API. The dashboard page opens "
            f"on {PAGE_DAYS} days (its own choice; it always sends `days`)",
        ),
        (
            "`from`, `to` (dashboard, breakdown)",
            f"local dates `YYYY-MM-DD` of the project's zone, both inclusive, "
            f"{MIN_DATE.isoformat()} to {MAX_DATE.isoformat()}; at most {MAX_RANGE_DAYS} days; "
            "not with `days`",
        ),
        (
            "`limit` (breakdown)",
            f"an integer 1–{BREAKDOWN_MAX_LIMIT:,}; default {BREAKDOWN_DEFAULT_LIMIT}",
        ),
        (
            "`POST /api/v2/query`",
            f"`pagination.limit` 1–{V2_MAX_LIMIT:,} (default {V2_MAX_LIMIT:,}), "
            f"`pagination.offset` at most {V2_MAX_OFFSET:,}; at most {V2_MAX_DIMENSIONS} "
            f"`dimensions`; `date_range` of at most {MAX_RANGE_DAYS} days",
        ),
        ("events per collect request", "1–100"),
        ("event `name`", "required, 1–100 characters"),
        ("`path`", "at most 2048 characters"),
        ("`url`, `referrer`", "at most 4096 characters each"),
        ("`sessionId`, `visitorId`", "at most 200 characters each"),
        (
            "`occurredAt`",
            "ISO 8601 / RFC 3339 date-time from 1970 on (e.g. `2026-11-23T10:00:00Z`), date "
            "and time in the extended form (with `-` and `:`); no offset means UTC; an offset as "
            "`Z`, `+05`, `+0530` or `+05:30`; a date alone (`2026-11-23`) is its 00:00 UTC (the "
            "previous local day in a zone behind UTC: send the time); `t` and `z` in either "
            "case; seconds optional; up to nine fractional digits, kept to the millisecond (cut, "
            "not rounded); second `60` (a leap second, `23:59:60`) is the last millisecond of its "
            "minute, in any minute; omitted, or later than receipt, means the receipt time; "
            + _oldest(s.retention_days),
        ),
        (
            "`metadata`",
            "at most 50 keys of 1–100 characters; values strings of at most 1024 characters, "
            "numbers (64-bit integers or doubles), booleans or null",
        ),
        (
            "`User-Agent` header",
            f"its first {MAX_USER_AGENT} characters are read (browser, os, device type, bot) "
            "and stored",
        ),
        (
            "`filters` (dashboard, breakdown, `POST /api/v2/query`)",
            f"at most {MAX_FILTERS} filters of 1–{MAX_VALUES} values of at most "
            f"{MAX_VALUE_LENGTH} characters each, and at most {MAX_FILTERS_BYTES:,} bytes "
            f"({size(MAX_FILTERS_BYTES)}) of JSON text in all, as UTF-8 (the parameter's value "
            "once URL-decoded; in a v2 body, the filters written as compact JSON); 400 beyond. "
            "So that they fit in a URL: granian takes a request target (path and query string) "
            f"of at most {MAX_TARGET_BYTES:,} bytes (414 with an empty body beyond, a fixed "
            f"limit), and {size(MAX_FILTERS_BYTES)} of filters percent-encoded byte by byte is "
            f"{3 * MAX_FILTERS_BYTES:,} bytes",
        ),
        ("request body", _body(s.max_body_bytes)),
        (
            "body encoding",
            "UTF-8 JSON, no byte order mark, no duplicate keys; content type "
            "`application/json` or `text/plain`; uncompressed (a `Content-Encoding` other than "
            "`identity` is a 400)",
        ),
        (
            "collect rate limits",
            f"`TALLY_COLLECT_LIMIT_PER_KEY` {_rate(s.collect_limit_per_key)} per key, "
            f"`TALLY_COLLECT_LIMIT_PER_IP` {_rate(s.collect_limit_per_ip)} per client IP"
            f"{_beyond(s.collect_limit_per_key, s.collect_limit_per_ip)}",
        ),
        (
            "session endpoints rate limit",
            f"`TALLY_SESSION_LIMIT_PER_USER` {_rate(s.session_limit_per_user)} per user"
            f"{_beyond(s.session_limit_per_user)}",
        ),
        (
            "exports",
            f"`TALLY_EXPORT_LIMIT_PER_USER` {_rate(s.export_limit_per_user)} per user, on top "
            f"of the session endpoints' limit{_beyond(s.export_limit_per_user)}",
        ),
        (
            "slow clients",
            f"headers within {s.header_timeout_seconds:g} s, then the body within "
            f"{s.body_timeout_seconds:g} s (408)",
        ),
        (
            "dashboard lists",
            "top lists 10 rows; `recentEvents` 20; "
            "`liveVisitors` (and `GET /api/live`) last 5 minutes",
        ),
    ]


def markdown(settings: Settings | None = None) -> str:
    lines = ["| what | limit or default |", "|---|---|"]
    lines += [f"| {what} | {rule} |" for what, rule in rows(settings)]
    return "\n".join(lines)

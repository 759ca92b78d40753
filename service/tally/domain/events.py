"""From a validated collect request to the rows stored in ``events``.

Rules (CONTRACT.md): ``occurredAt`` without an offset is UTC; omitted, it is the receipt time; later
than receipt, it is stored as the receipt time. ``metadata.browser``/``os``/``deviceType`` fall back
to what the User-Agent says when absent (or not a non-empty string). The device type ``bot`` is
the User-Agent's alone: a bot is stored as ``bot`` whatever ``metadata.deviceType`` says, and a
``metadata.deviceType`` of ``bot`` from a User-Agent that is not a bot's is not taken.
``metadata.durationMs`` is kept as a duration when it is a number >= 0.

Dimensions (schema 005): ``source``, ``channel`` and ``utm_*`` from each event's ``url`` and
``referrer`` (``domain/acquisition.py``); ``country`` resolved by the caller from the raw client
IP (``domain/geo.py``); ``is_bot``, and the device type ``bot`` with it, from the User-Agent
(``domain/bots.py``).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import msgspec

from .acquisition import acquire
from .bots import client_of
from .geo import UNKNOWN as UNKNOWN_COUNTRY

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_encode = msgspec.json.Encoder().encode


class InvalidEvent(ValueError):
    """An event that passed the schema but breaks a rule the schema cannot express."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


class EventLike(Protocol):
    name: str
    path: str | None
    url: str | None
    referrer: str | None
    session_id: str | None
    visitor_id: str | None
    occurred_at: str | None
    metadata: dict[str, Any] | None


def parse_time(value: str) -> datetime:
    """ISO 8601 (``Z`` or an offset; none means UTC; a bare date is its midnight), in the forms
    http/schemas.ISO_DATETIME admits: ``t``/``z`` in either case, digits past the microsecond
    cut (Tally keeps milliseconds), a leap second read as the last instant of its minute."""
    text = _LEAP_SECOND.sub(r"\1:59.999999", value.strip().upper())
    return datetime.fromisoformat(_PAST_MICROSECONDS.sub(r"\1", text))


_LEAP_SECOND = re.compile(r"([T ]\d{2}:\d{2}):60(?:[.,]\d+)?")
_PAST_MICROSECONDS = re.compile(r"([.,]\d{6})\d+")
# The User-Agent header is read (browser, os, device, bot) and stored up to this many characters:
# real ones are a few hundred; parsing costs about 5 µs a character, so an unbounded one let
# each request with a fresh 60 KB header hold the event loop for 0.3 s (found by testing).
MAX_USER_AGENT = 512


def to_millis(dt: datetime) -> int:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return (dt - EPOCH) // _MS


def _text(metadata: dict[str, Any], key: str, fallback: str) -> str:
    value = metadata.get(key)
    return value if isinstance(value, str) and value else fallback


def _device_type(metadata: dict[str, Any], from_user_agent: str, bot: int) -> str:
    """``metadata.deviceType``, except that the device type ``bot`` goes with ``is_bot`` and only
    with it: a bot's User-Agent is stored as ``bot`` whatever the metadata says, and a page that
    calls itself ``bot`` from a browser's User-Agent gets the User-Agent's device type."""
    if bot:
        return from_user_agent  # "bot" (bots.client_of)
    value = _text(metadata, "deviceType", from_user_agent)
    return from_user_agent if value.strip().lower() == "bot" else value


def _duration(metadata: dict[str, Any]) -> float | None:
    value = metadata.get("durationMs")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else None


DAY_MS = 86_400_000

# The third hex digit of a UUID's fourth group carries its variant (RFC 9562: 10xx).
_VARIANT = {c: "89ab"[int(c, 16) & 3] for c in "0123456789abcdef"}


def event_ids(n: int) -> list[str]:
    """``n`` random version-4 UUIDs as text: events' ids, given when Tally accepts them and kept
    in the ingest log with them, so that a segment loaded again (an INSERT cut short by a crash
    after ``events`` stored it and before every rollup did) gives the rollups the ids ``events``
    holds; the rollups' session key of an event without a session id is a hash of its id. One
    read of the random source per request, formatted by slicing (a third of ``uuid.uuid4``'s
    time)."""
    h = os.urandom(16 * n).hex()
    return [
        f"{h[i : i + 8]}-{h[i + 8 : i + 12]}-4{h[i + 13 : i + 16]}-"
        f"{_VARIANT[h[i + 16]]}{h[i + 17 : i + 20]}-{h[i + 20 : i + 32]}"
        for i in range(0, 32 * n, 32)
    ]


def to_rows(
    events: Sequence[EventLike],
    *,
    project_id: str,
    key_id: str,
    received_ms: int,
    ip: str,
    user_agent: str,
    country: str = UNKNOWN_COUNTRY,
    keep_days: int = 0,
) -> list[tuple[Any, ...]]:
    """One row per event, in the column order of ``storage.writer.LOGGED_COLUMNS`` (the
    event's id last).

    Timestamps are seconds since the epoch, exact to the millisecond (``ms / 1000``).
    ``keep_days``: the retention (TALLY_RETENTION_DAYS, 0 for none). An event of a UTC day that
    has already left it is refused: ClickHouse's TTL drops such a row as it is written, so
    acknowledging it would lose it (storage/migrate.py, RETENTION_COLUMNS: a day's rows leave
    ``keep_days`` days after the day ended, so the oldest day kept is today minus that many).
    """
    user_agent = user_agent[:MAX_USER_AGENT]
    client, bot = client_of(user_agent)
    received = received_ms / 1000
    oldest_ms = (received_ms // DAY_MS - keep_days) * DAY_MS if keep_days > 0 else 0
    rows = []
    ids = event_ids(len(events))
    for index, event in enumerate(events):
        if event.occurred_at is None:
            occurred = received
        else:
            try:
                occurred = to_millis(parse_time(event.occurred_at))
            except ValueError:
                raise InvalidEvent(
                    f"$.events[{index}].occurredAt",
                    "must be a real ISO 8601 date-time, e.g. 2026-11-23T10:00:00Z",
                ) from None
            if occurred < 0:
                raise InvalidEvent(
                    f"$.events[{index}].occurredAt", "must not be before 1970-01-01T00:00:00Z"
                )
            if occurred < oldest_ms:
                raise InvalidEvent(
                    f"$.events[{index}].occurredAt",
                    f"is older than the {keep_days} days this Tally keeps events "
                    "(TALLY_RETENTION_DAYS): it would not be stored",
                )
            occurred = min(occurred, received_ms) / 1000
        metadata = event.metadata or {}
        acquisition = acquire(event.url or "", event.referrer or "")
        rows.append(
            (
                project_id,
                event.name,
                occurred,
                received,
                event.path or "",
                event.url or "",
                event.referrer or "",
                event.session_id or "",
                event.visitor_id or "",
                _text(metadata, "browser", client.browser),
                _text(metadata, "os", client.os),
                _device_type(metadata, client.device_type, bot),
                _duration(metadata),
                _encode(metadata).decode() if metadata else "{}",
                ip,
                user_agent,
                key_id,
                *acquisition,
                country,
                bot,
                ids[index],
            )
        )
    return rows

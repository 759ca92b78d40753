"""Rate limits (sliding-window counters from the ``limits`` package, kept in process memory)."""

from __future__ import annotations

import ipaddress
import math
import re
import time
from functools import lru_cache
from typing import Any

from limits import RateLimitItem, parse
from limits.storage import MemoryStorage
from limits.strategies import SlidingWindowCounterRateLimiter
from litestar.connection import ASGIConnection
from litestar.exceptions import TooManyRequestsException

from ..config import Settings


class RateLimited(TooManyRequestsException):
    def __init__(self, retry_after: int) -> None:
        super().__init__(detail="Too many requests", headers={"Retry-After": str(retry_after)})


class _Counters(MemoryStorage):
    """``limits``' in-memory counters without the thread they start to drop expired ones: a
    ``threading.Timer`` started again 10 ms after the last one ended, so under steady traffic a
    new thread every 10 ms or so, started on the event loop's thread by the request. Where no
    thread could be started (a container's pids limit, memory exhausted) the limiter raised and
    the dashboard answered 500; a start that failed half-way froze the worker for good (found by
    a review making mmap fail with ENOMEM under strace). Expired counters are dropped inline
    instead, at most once a second; a read drops an expired counter by itself meanwhile."""

    EXPIRE_EVERY_SECONDS = 1.0

    def __init__(self) -> None:
        super().__init__()  # starts one timer, once, at startup
        self._expire_at = 0.0

    def _MemoryStorage__schedule_expiry(self) -> None:  # replaces the library's, by its name
        now = time.monotonic()
        if now >= self._expire_at:
            self._expire_at = now + self.EXPIRE_EVERY_SECONDS
            self._MemoryStorage__expire_events()  # type: ignore[attr-defined]


class RateLimits:
    def __init__(self, settings: Settings) -> None:
        self._limiter = SlidingWindowCounterRateLimiter(_Counters())
        self.per_key = _parse(settings.collect_limit_per_key)
        self.per_ip = _parse(settings.collect_limit_per_ip)
        self.per_user = _parse(settings.session_limit_per_user)

    def check(self, item: RateLimitItem | None, *identifiers: str, count: bool = True) -> None:
        """Count one hit; raise RateLimited (429 with Retry-After) when over the limit.
        ``count`` False: only whether one more hit would pass, none counted (a HEAD that asks
        whether its GET will be answered)."""
        if item is None:
            return
        allowed = self._limiter.hit if count else self._limiter.test
        if not allowed(item, *identifiers):
            stats = self._limiter.get_window_stats(item, *identifiers)
            raise RateLimited(max(1, math.ceil(stats.reset_time - time.time())))


def _parse(value: str) -> RateLimitItem | None:
    return parse(value) if value.strip() else None


def client_ip(connection: ASGIConnection[Any, Any, Any, Any]) -> str:
    """First address of x-forwarded-for when it is one, else the socket peer."""
    address = forwarded_address(connection.headers.get("x-forwarded-for", ""))
    if address is not None:
        return address
    return canonical_address(connection.client.host) if connection.client else ""


_PORT = re.compile(r"^[0-9]{1,5}$")


@lru_cache(maxsize=4096)
def forwarded_address(header: str) -> str | None:
    """The client address an ``x-forwarded-for`` value names first, when that is an IPv4 or IPv6
    address, in its :func:`canonical_address` spelling (``203.0.113.7``, ``2001:db8::1``); a
    port after it is left out (``203.0.113.7:443``, ``[2001:db8::1]:443``, as some proxies
    send). None for anything else (``garbage``, ``unknown``, empty), so that the socket peer is
    used instead. The header is trusted as the contract says (Tally runs behind a proxy that
    sets it); only its form is checked."""
    first = header.split(",", 1)[0].strip()
    version = None
    if first.startswith("["):  # [IPv6] or [IPv6]:port
        host, closed, rest = first[1:].partition("]")
        if not closed or (rest and not (rest[:1] == ":" and _PORT.match(rest[1:]))):
            return None
        first, version = host, 6
    elif first.count(":") == 1:  # IPv4:port (an IPv6 address has at least two colons)
        host, _, port = first.partition(":")
        if not _PORT.match(port):
            return None
        first, version = host, 4
    try:
        address = ipaddress.ip_address(first)
    except ValueError:
        return None
    if version is not None and address.version != version:
        return None
    if getattr(address, "scope_id", None) is not None:
        # ``fe80::1%eth0``: a zone names an interface of the sender's own host, never a client
        # of Tally's; and any text may follow the ``%`` (it was stored as the IP, up to 5 KB).
        return None
    return canonical_address(first)


@lru_cache(maxsize=4096)
def canonical_address(text: str) -> str:
    """One spelling per address: IPv6 compressed and in lower case, an IPv4-mapped IPv6 address
    as the IPv4 address it holds (``2001:DB8::1`` and ``2001:db8:0:0:0:0:0:1`` are
    ``2001:db8::1``; ``::ffff:192.0.2.9`` is ``192.0.2.9``). Spelt as written, one visitor was
    three IPs, and three hashes under TALLY_IP_PRIVACY=hash. A socket peer's zone (a link-local
    ``fe80::1%eth0``) is left out. Anything else is kept as it is."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return text
    if getattr(address, "scope_id", None) is not None:
        address = ipaddress.ip_address(text.partition("%")[0])
    mapped = getattr(address, "ipv4_mapped", None)
    return str(mapped or address)

"""Rate limits (sliding-window counters from the ``limits`` package, kept in process memory)."""

from __future__ import annotations

import math
import time
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


class RateLimits:
    def __init__(self, settings: Settings) -> None:
        self._limiter = SlidingWindowCounterRateLimiter(MemoryStorage())
        self.per_key = _parse(settings.collect_limit_per_key)
        self.per_ip = _parse(settings.collect_limit_per_ip)
        self.per_user = _parse(settings.session_limit_per_user)

    def check(self, item: RateLimitItem | None, *identifiers: str) -> None:
        """Count one hit; raise RateLimited (429 with Retry-After) when over the limit."""
        if item is None:
            return
        if not self._limiter.hit(item, *identifiers):
            stats = self._limiter.get_window_stats(item, *identifiers)
            raise RateLimited(max(1, math.ceil(stats.reset_time - time.time())))


def _parse(value: str) -> RateLimitItem | None:
    return parse(value) if value.strip() else None


def client_ip(connection: ASGIConnection[Any, Any, Any, Any]) -> str:
    """First address of x-forwarded-for, else the socket peer."""
    forwarded = connection.headers.get("x-forwarded-for", "")
    first = forwarded.split(",", 1)[0].strip()
    if first:
        return first
    return connection.client.host if connection.client else ""

"""The rate limiter's counters, in process memory: no thread per check.

``limits``' memory storage started a ``threading.Timer`` again 10 ms after the last one ended, to
drop expired counters: under steady traffic a thread every 10 ms or so, started by the request
on the event loop's thread. Where no thread could be started the check raised (a 500), and a
start that failed half-way froze the worker (tests/faults/test_resources.py makes thread starts
fail in a running server)."""

from __future__ import annotations

import threading
import time

import pytest

from tally.config import Settings
from tally.http.ratelimit import RateLimited, RateLimits


def timers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if isinstance(t, threading.Timer)]


def test_checks_start_no_thread_and_still_limit():
    limits = RateLimits(Settings(collect_limit_per_key="50/second"))
    time.sleep(0.05)  # the one timer the storage starts when it is made has run
    seen: list[threading.Thread] = []
    limited = 0
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:
        try:
            limits.check(limits.per_key, "key")
        except RateLimited:
            limited += 1
        seen += timers()
        time.sleep(0.002)
    assert seen == []
    assert limited > 0  # still a limiter: 50 a second, and far more were tried


def test_expired_counters_are_dropped_inline():
    limits = RateLimits(Settings(collect_limit_per_key="1/second"))
    for n in range(100):
        limits.check(limits.per_key, f"key-{n}")
    storage = limits._limiter.storage
    assert len(storage.expirations) >= 100
    time.sleep(2.1)  # every counter expired, and the next expiry is due
    limits.check(limits.per_key, "another")
    assert len(storage.expirations) <= 2
    with pytest.raises(RateLimited):
        limits.check(limits.per_key, "another")

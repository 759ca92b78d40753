"""What computing the dimensions costs per event at ingestion: `python -m benchmarks.enrichment`.

Times, with ``timeit``, the parts the collect handler adds for schema 005 (country from the IP,
source / channel / utm_* from url and referrer, the bot flag from the User-Agent) and the whole
``to_rows`` of a 1-event and a 100-event request. "warm" repeats inputs the process has seen (the
per-User-Agent and per-host caches answer); "cold" gives every call a User-Agent, IP and referrer
host it has not seen. On a shared machine the figures are noisy: compare runs, not digits.
"""

from __future__ import annotations

import argparse
import itertools
import timeit
from collections.abc import Callable
from typing import Any

CHROME = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/126.0.{}.0 Safari/537.36"
)
URL = "https://shop.example.com/landing?utm_source=newsletter&utm_medium=email&utm_campaign=q{}"
REFERRER = "https://www.google.de/search?q={}"


class Event:
    """What to_rows reads from a decoded event."""

    def __init__(self, n: int) -> None:
        self.name = "pageview"
        self.path = "/landing"
        self.url = URL.format(n % 7)  # a few landing urls; a new referrer per event
        self.referrer = REFERRER.format(n)
        self.session_id = f"s{n}"
        self.visitor_id = f"v{n}"
        self.occurred_at = None
        self.metadata = None


def _us(fn: Callable[[], Any], number: int) -> float:
    best = min(timeit.repeat(fn, number=number, repeat=5))
    return round(best / number * 1e6, 2)


def measure(number: int = 20_000) -> dict[str, float]:
    """Microseconds per call (per event for to_rows), best of five rounds."""
    from tally.domain import acquisition, bots, events, geo, useragent

    reader = geo.CountryReader()
    counter = itertools.count()
    out: dict[str, float] = {}

    out["country, warm"] = _us(lambda: reader.country("81.2.69.142"), number)
    out["country, cold"] = _us(lambda: reader._lookup(f"81.2.{next(counter) % 250}.1"), number)
    out["acquisition (utm url + known referrer), warm"] = _us(
        lambda: acquisition.acquire(URL.format(1), REFERRER.format(1)), number
    )
    out["acquisition, new url and referrer host each time"] = _us(
        lambda: acquisition.acquire(
            URL.format(next(counter)), f"https://site{next(counter)}.example.org/"
        ),
        number,
    )
    out["is_bot, warm"] = _us(lambda: bots.is_bot(CHROME.format(1)), number)
    cold = max(number // 100, 20)

    def client(flag: bool) -> Callable[[], Any]:
        def run() -> None:  # a User-Agent never seen: ua-parser once, then the bot patterns
            ua = CHROME.format(next(counter))
            useragent.classify(ua)
            if flag:
                bots.is_bot(ua)

        return run

    out["classify (before 005), new User-Agent"] = _us(client(False), cold)
    out["classify + is_bot, new User-Agent"] = _us(client(True), cold)
    fixed = acquisition.acquire(URL.format(1), REFERRER.format(1))
    for size in (1, 100):
        batch = [Event(n) for n in range(size)]

        def rows(batch: list[Event] = batch, ua: str = CHROME.format(1)) -> None:
            events.to_rows(
                batch,
                project_id="p" * 24,
                key_id="k",
                received_ms=1_700_000_000_000,
                ip="81.2.69.142",
                user_agent=ua,
                country=reader.country("81.2.69.142"),
            )

        out[f"to_rows per event, {size}-event request, warm"] = round(
            _us(rows, max(number // size, 20)) / size, 2
        )
        # The same with the dimension functions answering a constant: what to_rows cost before.
        # (classify alone, as before schema 005: no bot rule)
        saved = events.acquire, events.client_of
        events.acquire = lambda url, referrer: fixed
        events.client_of = lambda ua: (useragent.classify(ua), 0)
        try:
            out[f"to_rows per event, {size}-event request, dimensions stubbed"] = round(
                _us(rows, max(number // size, 20)) / size, 2
            )
        finally:
            events.acquire, events.client_of = saved
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20_000, help="calls per timing round")
    args = parser.parse_args(argv)
    for name, value in measure(args.number).items():
        print(f"{name:<60} {value:>9.2f} µs")


if __name__ == "__main__":
    main()

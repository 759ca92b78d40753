"""Browser, OS and device type from a User-Agent string, via the ua-parser project's rules."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

from ua_parser import Result, parse

UNKNOWN = "Unknown"
_TABLET_HINTS = ("ipad", "tablet", "kindle", "silk", "playbook")
_MOBILE_OS = {"ios", "android", "windows phone", "blackberry os", "kaios", "firefox os"}

# Product tokens of HTTP client libraries and tools (Tally's list; issue 16 names the first six
# kinds). ua-parser calls some of them a Spider (Python-urllib, urllib3, Java, WinHttp) and isbot
# calls them all bots; Tally does not (domain/bots.py).
HTTP_LIBRARIES = re.compile(
    r"^(?:curl|libcurl|python-requests|python-httpx|httpx|python-urllib3?|urllib3"
    r"|python/[\d.]+ aiohttp|aiohttp|go-http-client|okhttp|node-fetch|undici|node|axios|got"
    r"|java-http-client|java|apache-httpclient|dart|dio|guzzlehttp|php|ruby|faraday|reqwest"
    r"|rest-client|restsharp|libwww-perl|lwp-request|lwp-trivial|httpie|postmanruntime"
    r"|insomnia|winhttp|wget|powershell|deno|bun)\b",
    re.IGNORECASE,
)
# What an HTTP library's User-Agent says when a crawler uses it.
SELF_DECLARED = re.compile(r"bot\b|bot/|crawl|spider|scrap|monitor|headless", re.IGNORECASE)


def server_sender(user_agent: str) -> bool:
    """An HTTP library or tool sending on someone's behalf (``curl/8.5.0``, ``Java/17``), not a
    crawler: its User-Agent starts with the library's product token and does not name itself a
    bot, crawler, spider, scraper, monitor or headless browser."""
    return bool(HTTP_LIBRARIES.match(user_agent)) and not SELF_DECLARED.search(user_agent)


class Client(NamedTuple):
    browser: str
    os: str
    device_type: str


@lru_cache(maxsize=4096)
def parsed(user_agent: str) -> Result:
    """ua-parser's reading of a User-Agent, parsed once per process for classify and bots."""
    return parse(user_agent)


@lru_cache(maxsize=4096)
def classify(user_agent: str) -> Client:
    """Browser family, OS family and one of desktop/mobile/tablet (``Unknown`` if unsure): the
    device a person would hold. Whether the sender is a bot is domain/bots.py's question, and
    :func:`tally.domain.bots.client_of` makes the device type ``bot`` when it is."""
    if not user_agent:
        return Client(UNKNOWN, UNKNOWN, UNKNOWN)
    result = parsed(user_agent)
    browser = result.user_agent.family if result.user_agent else "Other"
    os_family = result.os.family if result.os else "Other"
    lowered = user_agent.lower()
    # An Android browser says "Mobile" on a phone and not on a tablet; an app's own HTTP stack
    # (Dalvik, okhttp) never says it, and is on a phone far more often than not.
    if any(hint in lowered for hint in _TABLET_HINTS) or (
        os_family == "Android" and "mobile" not in lowered and lowered.startswith("mozilla/")
    ):
        device_type = "tablet"
    elif os_family.lower() in _MOBILE_OS or "mobile" in lowered:
        device_type = "mobile"
    elif os_family in ("Other", ""):
        device_type = UNKNOWN
    else:
        device_type = "desktop"
    return Client(
        browser if browser != "Other" else UNKNOWN,
        os_family if os_family != "Other" else UNKNOWN,
        device_type,
    )

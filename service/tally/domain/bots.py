"""Is a User-Agent a bot: a crawler, spider, monitoring probe or headless browser?

Two maintained lists, either one suffices:

- ua-parser's device class ``Spider`` (uap-core's regexes, already Tally's User-Agent parser:
  Googlebot, bingbot, UptimeRobot, AhrefsBot, GPTBot, ...);
- the isbot project's patterns (github.com/omrilotan/isbot, Unlicense), as packaged for Python by
  ``is-bot`` (Apache-2.0): wider, and it also knows headless browsers, Lighthouse, Pingdom,
  Selenium, Playwright, ...

isbot also calls every HTTP library a bot, and ua-parser calls some of them a Spider
(Python-urllib, urllib3, Java, WinHttp). Tally does not: server-side senders (curl,
python-requests, httpx, Go-http-client, okhttp, node-fetch, Python-urllib, Java, HTTPie, ...) post
events on purpose, and those events count. A User-Agent that starts with one of the libraries of
``useragent.HTTP_LIBRARIES`` is a bot only when it also names itself one (``bot``, ``crawl``,
``spider``, ...), whatever either list says. For the same reason, isbot's four "shape"
patterns are left out: they flag any User-Agent that is only a product name and version
(``MyApp/2.1``, ``testclient``), which says "not a browser", not "a known crawler".

isbot's generic term ``manager`` (added in isbot 3.0.22 in place of ``bordermanager``: Novell
BorderManager, download managers, ``Cloudflare-Traffic-Manager``, ``luminati-proxy-manager``,
``GoogleTagManager``, ...) also matches ``WebAppManager``, the web runtime LG's webOS TVs name
at the end of their browsers' User-Agent. Tally reads it as ``manager`` not preceded by
``webapp``: every other ``...manager`` stays a bot, an LG TV is a viewer.
"""

from __future__ import annotations

from functools import lru_cache

from is_bot import Bots

from .useragent import Client, classify, parsed, server_sender

# isbot's patterns are JavaScript regexes; ``is-bot`` compiles them with the ``regex`` module,
# which accepts the variable-width look-behind one of them uses.
_SHAPE_ONLY = frozenset(
    {
        r"^[\w \.\-\(?:\):%]+(?:/v?\d+(?:\.\d+)?(?:\.\d{1,10})*?)?(?:,|$)",
        r"^[\w\-]+/[\w]+$",
        r"^\w+/[\w\(\)]*$",
        r"^\w+/\d\.\d\s\([\w@]+\)$",
    }
)
# isbot's "manager", but not LG webOS's "WebAppManager" (module docstring).
_MANAGER, _MANAGER_NOT_WEBOS = "manager", r"(?<!webapp)manager"
_ISBOT = Bots()
_ISBOT.exclude(_SHAPE_ONLY | {_MANAGER})
_ISBOT.extend([_MANAGER_NOT_WEBOS])


@lru_cache(maxsize=4096)  # as useragent.classify's
def is_bot(user_agent: str) -> bool:
    """True when the User-Agent is a known crawler, spider, monitor or headless browser.

    An empty User-Agent is not called a bot: the page's own tracker always sends one, and a
    server-side sender without one is still a sender.
    """
    if not user_agent:
        return False
    if server_sender(user_agent):
        return False
    device = parsed(user_agent).device  # the parse classify() made: one per User-Agent
    if device is not None and device.family == "Spider":
        return True
    return _ISBOT.is_bot(user_agent)


def client_of(user_agent: str) -> tuple[Client, int]:
    """What collect stores of a User-Agent: its browser, OS and device type, and ``is_bot`` (1 or
    0). The device type is ``bot`` exactly when ``is_bot`` is 1, so that a deviceType breakdown
    and the bot rule never disagree (a phone named Cubot is a phone; HeadlessChrome is a bot)."""
    client = classify(user_agent)
    if is_bot(user_agent):
        return client._replace(device_type="bot"), 1
    return client, 0

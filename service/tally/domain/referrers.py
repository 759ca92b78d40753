"""Names and GA4 source categories of well-known referrer sites.

A small curated table, kept in code on purpose: no package registry carries a current referrer
list (checked 2026-11-23: PyPI's ``referer-parser`` is from 2016, npm's from 2014; Snowplow's
``referers.yml`` and Matomo's ``searchengine-and-social-list`` are only on GitHub, Packagist and
Debian, at 3.14.0 from 2023). The names follow Matomo's ``searchengine-and-social-list``
(``SearchEngines.yml``, ``Socials.yml``); the categories follow the source categories that
Google publishes with GA4's default channel group (support.google.com/analytics/answer/9756891,
"Source categories": SOURCE_CATEGORY_SEARCH, _SOCIAL, _VIDEO, _SHOPPING). Only the sites most
traffic comes from are listed; any other host is shown as itself (without ``www.``).

A pattern is a host and all its subdomains (``facebook.com`` covers ``l.facebook.com``), or a
name followed by ``.*`` for every top-level domain, country ones included (``google.*`` covers
``google.de``, ``www.google.co.uk``, ``google.com.br``). ``aliases`` are the short names
campaigns use as ``utm_source`` (``fb``, ``ig``) that GA4's lists also hold. An Android app's
referrer (``android-app://com.linkedin.android/``) is looked up by its package (``_APPS``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

SEARCH, SOCIAL, VIDEO, SHOPPING = "search", "social", "video", "shopping"


class Site(NamedTuple):
    name: str
    category: str  # one of the four above, or "" for a known site outside them


# (name, category, host patterns, utm_source aliases). More specific hosts before the domain
# they belong to is not needed: the longest matching host wins, then ``name.*``.
_SITES: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    # Search engines
    ("Google", SEARCH, ("google.*",), ("google",)),
    ("Bing", SEARCH, ("bing.com",), ("bing",)),
    ("Yahoo!", SEARCH, ("yahoo.*",), ("yahoo",)),
    ("DuckDuckGo", SEARCH, ("duckduckgo.com", "ddg.gg"), ("duckduckgo",)),
    ("Baidu", SEARCH, ("baidu.com",), ("baidu",)),
    ("Yandex", SEARCH, ("yandex.*", "ya.ru"), ("yandex",)),
    ("Ecosia", SEARCH, ("ecosia.org",), ("ecosia",)),
    ("Naver", SEARCH, ("naver.com",), ("naver",)),
    ("Seznam", SEARCH, ("seznam.cz",), ("seznam",)),
    ("Brave", SEARCH, ("search.brave.com",), ()),
    ("Startpage", SEARCH, ("startpage.com",), ("startpage",)),
    ("Qwant", SEARCH, ("qwant.com",), ("qwant",)),
    ("AOL", SEARCH, ("aol.*",), ("aol",)),
    ("Ask", SEARCH, ("ask.com",), ("ask",)),
    ("Sogou", SEARCH, ("sogou.com",), ("sogou",)),
    ("360 Search", SEARCH, ("so.com",), ()),
    ("Daum", SEARCH, ("daum.net",), ("daum",)),
    ("Yahoo! Japan", SEARCH, ("search.yahoo.co.jp",), ()),
    # Social networks
    ("Facebook", SOCIAL, ("facebook.*", "fb.com", "fb.me"), ("facebook", "fb")),
    ("Instagram", SOCIAL, ("instagram.com",), ("instagram", "ig")),
    ("Twitter", SOCIAL, ("twitter.com", "t.co", "x.com"), ("twitter",)),
    ("LinkedIn", SOCIAL, ("linkedin.com", "lnkd.in"), ("linkedin",)),
    ("Reddit", SOCIAL, ("reddit.com", "redd.it"), ("reddit",)),
    ("Pinterest", SOCIAL, ("pinterest.*", "pin.it"), ("pinterest",)),
    ("TikTok", SOCIAL, ("tiktok.com",), ("tiktok",)),
    ("Snapchat", SOCIAL, ("snapchat.com",), ("snapchat",)),
    ("Tumblr", SOCIAL, ("tumblr.com",), ("tumblr",)),
    ("VKontakte", SOCIAL, ("vk.com",), ("vk",)),
    ("Threads", SOCIAL, ("threads.net", "threads.com"), ("threads",)),
    ("Bluesky", SOCIAL, ("bsky.app",), ("bluesky",)),
    ("Mastodon", SOCIAL, ("mastodon.social",), ("mastodon",)),
    ("Hacker News", SOCIAL, ("news.ycombinator.com",), ()),
    ("Quora", SOCIAL, ("quora.com",), ("quora",)),
    ("WhatsApp", SOCIAL, ("whatsapp.com",), ("whatsapp",)),
    ("Telegram", SOCIAL, ("t.me", "telegram.org"), ("telegram",)),
    ("Weibo", SOCIAL, ("weibo.com",), ("weibo",)),
    ("Medium", SOCIAL, ("medium.com",), ()),
    ("Slack", SOCIAL, ("slack.com",), ("slack",)),
    ("Discord", SOCIAL, ("discord.com", "discord.gg"), ("discord",)),
    ("Messenger", SOCIAL, ("messenger.com",), ("messenger",)),
    ("Line", SOCIAL, ("line.me",), ()),
    ("XING", SOCIAL, ("xing.com",), ("xing",)),
    # Video
    ("YouTube", VIDEO, ("youtube.com", "youtu.be"), ("youtube",)),
    ("Vimeo", VIDEO, ("vimeo.com",), ("vimeo",)),
    ("Twitch", VIDEO, ("twitch.tv",), ("twitch",)),
    ("Dailymotion", VIDEO, ("dailymotion.com",), ("dailymotion",)),
    ("TED", VIDEO, ("ted.com",), ()),
    ("Netflix", VIDEO, ("netflix.com",), ("netflix",)),
    # Shopping
    ("Amazon", SHOPPING, ("amazon.*",), ("amazon",)),
    ("eBay", SHOPPING, ("ebay.*",), ("ebay",)),
    ("Etsy", SHOPPING, ("etsy.com",), ("etsy",)),
    ("Shopify", SHOPPING, ("shopify.com",), ("shopify",)),
    ("Walmart", SHOPPING, ("walmart.com",), ("walmart",)),
    ("AliExpress", SHOPPING, ("aliexpress.com",), ("aliexpress",)),
    ("Google Shopping", SHOPPING, ("shopping.google.com",), ()),
    # Known by name, referral traffic (webmail, code hosts, encyclopaedias, assistants)
    ("Gmail", "", ("mail.google.com",), ()),
    ("Outlook.com", "", ("outlook.live.com",), ()),
    ("Yahoo! Mail", "", ("mail.yahoo.com",), ()),
    ("GitHub", "", ("github.com",), ()),
    ("Wikipedia", "", ("wikipedia.org",), ()),
    ("ChatGPT", "", ("chatgpt.com", "chat.openai.com"), ()),
    ("Perplexity", "", ("perplexity.ai",), ()),
)

_EXACT: dict[str, Site] = {}
_ANY_TLD: dict[str, Site] = {}
_ALIASES: dict[str, Site] = {}
for _name, _category, _patterns, _aliases in _SITES:
    _site = Site(_name, _category)
    for _pattern in _patterns:
        if _pattern.endswith(".*"):
            _ANY_TLD[_pattern[:-2]] = _site
        else:
            _EXACT[_pattern] = _site
    for _alias in _aliases:
        _ALIASES[_alias] = _site

# Android apps, as the referrer an app's in-app browser or link hand-off sends:
# ``android-app://<package>/`` (Chrome on Android: the app that opened the link). The package
# names the site under the name its web host has above, and so its category: the Google app
# (Search, Discover) is Google, a search engine.
_APPS: dict[str, str] = {
    "com.google.android.googlequicksearchbox": "Google",
    "com.google.android.gm": "Gmail",
    "com.google.android.youtube": "YouTube",
    "com.linkedin.android": "LinkedIn",
    "com.facebook.katana": "Facebook",
    "com.instagram.android": "Instagram",
    "com.twitter.android": "Twitter",
    "com.reddit.frontpage": "Reddit",
    "com.slack": "Slack",  # com.Slack: hosts are compared in lower case
    "org.telegram.messenger": "Telegram",
    "com.whatsapp": "WhatsApp",
}
_BY_NAME = {_name: Site(_name, _category) for _name, _category, _, _ in _SITES}
_APP_SITES: dict[str, Site] = {package: _BY_NAME[name] for package, name in _APPS.items()}

# Labels a top-level domain is made of (``com``, ``co.uk``, ``com.br``, ``de``, ``co.jp``).
_TLD_WORDS = frozenset({"com", "net", "org", "co", "edu", "gov", "ac", "or", "ne", "go", "gob"})


def _tld_like(labels: list[str]) -> bool:
    return 1 <= len(labels) <= 2 and all(
        label in _TLD_WORDS or (len(label) == 2 and label.isalpha()) for label in labels
    )


@lru_cache(maxsize=8192)
def lookup_host(host: str) -> Site | None:
    """The known site a (lower-case) host belongs to, or None."""
    labels = host.split(".")
    for i in range(len(labels) - 1):
        site = _EXACT.get(".".join(labels[i:]))
        if site is not None:
            return site
    for i in range(len(labels) - 1):
        site = _ANY_TLD.get(labels[i])
        if site is not None and _tld_like(labels[i + 1 :]):
            return site
    return None


@lru_cache(maxsize=8192)
def lookup_source(value: str) -> Site | None:
    """The known site a ``utm_source`` value names: a short name (``fb``) or a host."""
    value = value.strip().lower()
    site = _ALIASES.get(value)
    if site is None and "." in value:
        site = lookup_host(value.removeprefix("www."))
    return site


def lookup_app(package: str) -> Site | None:
    """The known site an Android app's package (lower case, from ``android-app://``) is."""
    return _APP_SITES.get(package)

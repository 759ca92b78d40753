"""Where a visit came from: ``source``, ``channel`` and the five ``utm_*`` values of an event.

- ``utm_source``, ``utm_medium``, ``utm_campaign``, ``utm_content``, ``utm_term``: from the query
  of the event's ``url``, percent- and ``+``-decoded, the parameter names in any case
  (``UTM_Source``); a repeated parameter counts by its first non-empty value; empty when absent.
- ``source``: ``utm_source`` when present; else ``Google`` when the url carries Google Ads'
  auto-tagging (``gclid``, ``gbraid``, ``wbraid``) and no ``utm_medium``; else the name people
  know the referrer's site by (``www.google.de`` -> ``Google``, ``t.co`` -> ``Twitter``,
  ``android-app://com.linkedin.android/`` -> ``LinkedIn``; ``domain/referrers.py``); else the
  referrer's host without ``www.`` (an unknown app: its package); ``Direct / None`` when there is
  no referrer or it is the page's own host (the url's host, ``www.`` or not).
- ``channel``: GA4's default channel group, below.

GA4's default channel group, as Google publishes it ("[GA4] Default channel group",
support.google.com/analytics/answer/9756891). The first rule that matches wins; source and medium
compare case-insensitively, and a regex must match the whole value:

1. Direct: source is ``(direct)`` and medium is ``(not set)`` or ``(none)``.
2. Cross-network: campaign contains ``cross-network``.
3. Paid Shopping: (source is a shopping site or campaign matches
   ``^(.*(([^a-df-z]|^)shop|shopping).*)$``) and medium matches the paid regex,
   ``^(.*cp.*|ppc|retargeting|paid.*)$``.
4. Paid Search: source is a search site and medium matches the paid regex.
5. Paid Social: source is a social site and medium matches the paid regex.
6. Paid Video: source is a video site and medium matches the paid regex.
7. Display: medium is one of ``display``, ``banner``, ``expandable``, ``interstitial``, ``cpm``.
8. Paid Other: medium matches the paid regex.
9. Organic Shopping: source is a shopping site or campaign matches the shopping regex.
10. Organic Social: source is a social site or medium is one of ``social``, ``social-network``,
    ``social-media``, ``sm``, ``social network``, ``social media``.
11. Organic Video: source is a video site or medium matches ``^(.*video.*)$``.
12. Organic Search: source is a search site or medium is ``organic``.
13. Email: source or medium is one of ``email``, ``e-mail``, ``e_mail``, ``e mail``.
14. Affiliates: medium is ``affiliate``.
15. Referral: medium is one of ``referral``, ``app``, ``link``.
16. Audio: medium is ``audio``.
17. SMS: source or medium is ``sms``.
18. Mobile Push Notifications: medium ends with ``push``, or contains ``mobile`` or
    ``notification``, or source is ``firebase``.
19. Otherwise: GA4 says ``Unassigned``; Tally says ``Other``.

The source and medium these rules read are GA4's session source and medium: ``utm_source`` /
``utm_medium`` when the url carries either (``(not set)`` for one that is missing); else
``google`` / ``cpc`` with auto-tagging; else, with a referrer from another host, that host and
``organic`` when it is a search engine, ``referral`` otherwise (as GA4 records them); else
``(direct)`` / ``(none)``. A url tagged with only ``utm_campaign`` (``utm_content``,
``utm_term``) is read as untagged: its source and medium come from auto-tagging or the referrer,
the source stored is that one, and the channel agrees with it (``?utm_campaign=spring`` from
www.google.com: ``Google``, ``Organic Search``); the campaign still counts in the campaign rules
(2, 3, 9). The "is a search / social / video / shopping site" tests use the source
categories in ``domain/referrers.py``.
"""

from __future__ import annotations

import contextlib
import re
import unicodedata
from functools import lru_cache
from typing import NamedTuple
from urllib.parse import parse_qsl, unquote, urlsplit

from .referrers import SEARCH, SHOPPING, SOCIAL, VIDEO, Site, lookup_app, lookup_host, lookup_source

DIRECT = "Direct / None"
UTM_KEYS = ("utm_source", "utm_medium", "utm_campaign", "utm_content", "utm_term")
_AUTO_TAGS = frozenset({"gclid", "gbraid", "wbraid"})
_ANDROID_APP = "android-app://"  # an app's referrer: android-app://<package>/

_PAID = re.compile(r"^(.*cp.*|ppc|retargeting|paid.*)$")
_SHOP_CAMPAIGN = re.compile(r"^(.*(([^a-df-z]|^)shop|shopping).*)$")
_VIDEO_MEDIUM = re.compile(r"^(.*video.*)$")
_DISPLAY = frozenset({"display", "banner", "expandable", "interstitial", "cpm"})
_SOCIAL_MEDIUM = frozenset(
    {"social", "social-network", "social-media", "sm", "social network", "social media"}
)
_EMAIL = frozenset({"email", "e-mail", "e_mail", "e mail"})
_REFERRAL = frozenset({"referral", "app", "link"})


class Acquisition(NamedTuple):
    source: str
    channel: str
    utm_source: str
    utm_medium: str
    utm_campaign: str
    utm_content: str
    utm_term: str


def _host(value: str) -> str:
    """Lower-case host of a URL (also of one written without a scheme), without port or dot."""
    if "//" not in value:
        value = "//" + value
    try:
        host = urlsplit(value).hostname or ""
    except ValueError:
        return ""
    return _spelled_once(host)


def _spelled_once(host: str) -> str:
    """One spelling of a host, whichever the URL used: percent-escapes decoded, ``xn--`` labels
    (what browsers send for an internationalized name) as the Unicode they stand for, NFC, lower
    case, no final dot. So ``xn--mnchen-3ya.de``, ``M%C3%BCnchen.de`` and ``münchen.de`` are one
    site: the page's own host is not a referrer, and one site is one source, under the name
    people read."""
    if "%" in host:
        host = unquote(host)
    if "xn--" in host:
        labels = host.split(".")
        for i, label in enumerate(labels):
            if label.startswith("xn--"):
                with contextlib.suppress(UnicodeError, ValueError):  # else kept as written
                    labels[i] = label[4:].encode("ascii").decode("punycode")
        host = ".".join(labels)
    if not host.isascii():
        host = unicodedata.normalize("NFC", host)
    return host.lower().rstrip(".")


def _utm(query: str) -> dict[str, str]:
    found: dict[str, str] = {}
    if "utm_" not in query.lower() and not any(tag in query for tag in _AUTO_TAGS):
        return found
    for key, value in parse_qsl(query, keep_blank_values=True):
        key = key.lower()
        value = value.strip()
        if value and key not in found and (key in UTM_KEYS or key in _AUTO_TAGS):
            found[key] = value
    return found


@lru_cache(maxsize=8192)
def _referrer(host: str, app: bool = False) -> tuple[str, Site | None]:
    """Display name and known site of a referrer host, or of an Android app's package (``app``:
    the referrer was ``android-app://<package>/``); an unknown app is shown as its package."""
    site = lookup_app(host) if app else lookup_host(host)
    if site is not None:
        return site.name, site
    return (host if app else host.removeprefix("www.")), None


def _category(source: str, site: Site | None) -> str:
    if site is None:
        site = lookup_source(source)
    return site.category if site else ""


@lru_cache(maxsize=4096)
def channel_of(source: str, medium: str, campaign: str, category: str) -> str:
    """GA4's default channel group of a session source / medium / campaign (module docstring)."""
    source, medium, campaign = source.lower(), medium.lower(), campaign.lower()
    paid = _PAID.fullmatch(medium) is not None
    shop_campaign = _SHOP_CAMPAIGN.fullmatch(campaign) is not None
    if source == "(direct)" and medium in ("(not set)", "(none)"):
        return "Direct"
    if "cross-network" in campaign:
        return "Cross-network"
    if (category == SHOPPING or shop_campaign) and paid:
        return "Paid Shopping"
    if category == SEARCH and paid:
        return "Paid Search"
    if category == SOCIAL and paid:
        return "Paid Social"
    if category == VIDEO and paid:
        return "Paid Video"
    if medium in _DISPLAY:
        return "Display"
    if paid:
        return "Paid Other"
    if category == SHOPPING or shop_campaign:
        return "Organic Shopping"
    if category == SOCIAL or medium in _SOCIAL_MEDIUM:
        return "Organic Social"
    if category == VIDEO or _VIDEO_MEDIUM.fullmatch(medium):
        return "Organic Video"
    if category == SEARCH or medium == "organic":
        return "Organic Search"
    if source in _EMAIL or medium in _EMAIL:
        return "Email"
    if medium == "affiliate":
        return "Affiliates"
    if medium in _REFERRAL:
        return "Referral"
    if medium == "audio":
        return "Audio"
    if source == "sms" or medium == "sms":
        return "SMS"
    if (
        medium.endswith("push")
        or "mobile" in medium
        or "notification" in medium
        or source == "firebase"
    ):
        return "Mobile Push Notifications"
    return "Other"


def acquire(url: str, referrer: str) -> Acquisition:
    """Source, channel and utm_* of an event from its ``url`` and ``referrer``.

    Cached: a site's landing urls and referrers repeat (the tracker sends the referrer with the
    first page of a visit), and a miss costs two URL parses, ~10 µs. Long ones (up to 4096
    characters each) are not kept, so that the cache stays a few MB at most.
    """
    if len(url) + len(referrer) <= _CACHED_LENGTH:
        return _acquire_cached(url, referrer)
    return _acquire(url, referrer)


def _acquire(url: str, referrer: str) -> Acquisition:
    query = ""
    page_host = ""
    if url:
        try:
            parts = urlsplit(url if "//" in url or url.startswith("/") else "//" + url)
            query = parts.query
            page_host = _spelled_once(parts.hostname or "")
        except ValueError:
            pass
    params = _utm(query) if query else {}
    utm = [params.get(key, "") for key in UTM_KEYS]
    utm_source, utm_medium, utm_campaign = utm[0], utm[1], utm[2]

    ref_host = _host(referrer) if referrer else ""
    app = ref_host != "" and referrer[:14].lower() == _ANDROID_APP
    if (
        ref_host
        and page_host
        and not app
        and ref_host.removeprefix("www.") == page_host.removeprefix("www.")
    ):
        ref_host = ""  # the site's own pages: not an acquisition
    ref_name, ref_site = _referrer(ref_host, app) if ref_host else ("", None)

    # Only utm_source and utm_medium make the session "tagged": a campaign alone leaves source
    # and medium to auto-tagging and the referrer, so that channel and stored source agree.
    if utm_source or utm_medium:
        source = utm_source or ref_name or DIRECT
        rule_source = utm_source or "(not set)"
        rule_medium = utm_medium or "(not set)"
        category = _category(utm_source, None) if utm_source else ""
    elif any(tag in params for tag in _AUTO_TAGS):
        source = "Google"
        rule_source, rule_medium, category = "google", "cpc", SEARCH
    elif ref_host:
        source = ref_name
        category = ref_site.category if ref_site else ""
        rule_source = ref_host
        rule_medium = "organic" if category == SEARCH else "referral"
    else:
        source, rule_source, rule_medium, category = DIRECT, "(direct)", "(none)", ""
    channel = channel_of(rule_source, rule_medium, utm_campaign, category)
    return Acquisition(source, channel, *utm)


_CACHED_LENGTH = 512
_acquire_cached = lru_cache(maxsize=8192)(_acquire)

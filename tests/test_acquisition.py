"""Reference tables for source, channel and utm_* (domain/acquisition.py, domain/referrers.py).

The channel rows follow GA4's published default channel group (support.google.com/analytics/
answer/9756891): each rule is hit, and the order between rules that overlap is checked.
"""

from __future__ import annotations

import pytest

from tally.domain.acquisition import DIRECT, acquire, channel_of
from tally.domain.referrers import lookup_host, lookup_source

PAGE = "https://shop.example.com/landing"


def tagged(**params: str) -> str:
    from urllib.parse import urlencode

    return f"{PAGE}?{urlencode(params)}"


# --- source -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "referrer", "source"),
    [
        # known engines and networks, in several TLDs and subdomains
        (PAGE, "https://www.google.com/", "Google"),
        (PAGE, "https://google.de/search?q=tally", "Google"),
        (PAGE, "https://www.google.co.uk/", "Google"),
        (PAGE, "https://www.google.com.br/url?q=x", "Google"),
        (PAGE, "https://news.google.com/articles/x", "Google"),
        (PAGE, "https://www.bing.com/search?q=x", "Bing"),
        (PAGE, "https://de.search.yahoo.com/", "Yahoo!"),
        (PAGE, "https://yandex.ru/search/", "Yandex"),
        (PAGE, "https://duckduckgo.com/", "DuckDuckGo"),
        (PAGE, "https://t.co/AbC123", "Twitter"),
        (PAGE, "https://x.com/someone/status/1", "Twitter"),
        (PAGE, "https://l.facebook.com/l.php?u=x", "Facebook"),
        (PAGE, "https://m.facebook.com/", "Facebook"),
        (PAGE, "https://www.reddit.com/r/x", "Reddit"),
        (PAGE, "https://www.youtube.com/watch?v=1", "YouTube"),
        (PAGE, "https://www.amazon.co.jp/dp/1", "Amazon"),
        (PAGE, "https://mail.google.com/mail/u/0/", "Gmail"),
        (PAGE, "https://news.ycombinator.com/item?id=1", "Hacker News"),
        # unknown hosts: the host without www.
        (PAGE, "https://news.example.org/a/b?c=d", "news.example.org"),
        (PAGE, "https://www.blog.example.net/post", "blog.example.net"),
        (PAGE, "http://WWW.Example.ORG:8080/x", "example.org"),
        (PAGE, "example.net/no-scheme", "example.net"),
        # look-alikes are not the site they imitate
        (PAGE, "https://google.evil.example/", "google.evil.example"),
        (PAGE, "https://notgoogle.com/", "notgoogle.com"),
        # none, or the site's own pages
        (PAGE, "", DIRECT),
        (PAGE, "https://shop.example.com/cart", DIRECT),
        (PAGE, "https://www.shop.example.com/cart", DIRECT),
        ("https://www.shop.example.com/", "https://shop.example.com/", DIRECT),
        # another host of the same site is a referral, as GA4 counts it without cross-domain
        (PAGE, "https://blog.example.com/post", "blog.example.com"),
        # utm_source wins over everything, kept as sent
        (tagged(utm_source="Newsletter"), "https://www.google.com/", "Newsletter"),
        (tagged(utm_source="google"), "", "google"),
        (tagged(utm_medium="email"), "https://t.co/x", "Twitter"),
        (tagged(utm_medium="email"), "", DIRECT),
        # a campaign alone names no source: the referrer or auto-tagging does
        (tagged(utm_campaign="spring"), "https://www.google.com/", "Google"),
        (f"{PAGE}?gclid=x&utm_campaign=spring", "", "Google"),
        # Google Ads auto-tagging
        (f"{PAGE}?gclid=Cj0KCQ", "", "Google"),
        (f"{PAGE}?gclid=Cj0KCQ", "https://www.googleadservices.com/", "Google"),
        # the url may be missing or a bare path: then nothing is "own"
        ("", "https://www.google.com/", "Google"),
        ("/pricing?utm_source=x", "", "x"),
        # One host in any spelling: punycode (what browsers send), Unicode, percent-escapes
        ("https://münchen.de/a", "https://xn--mnchen-3ya.de/b", DIRECT),
        ("https://xn--mnchen-3ya.de/a", "https://münchen.de/b", DIRECT),
        ("https://shop.example/a", "https://%73hop.example/b", DIRECT),
        ("https://mu\u0308nchen.de/a", "https://MÜNCHEN.de./b", DIRECT),  # NFD, case, dot
        ("https://shop.example/", "https://www.xn--bcher-kva.example/x", "bücher.example"),
        ("https://shop.example/", "https://b%C3%BCcher.example/x", "bücher.example"),
        ("https://shop.example/", "https://xn--zz-not-puny.example/", "xn--zz-not-puny.example"),
    ],
)
def test_source(url: str, referrer: str, source: str) -> None:
    assert acquire(url, referrer).source == source


# --- utm parsing ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            tagged(
                utm_source="news",
                utm_medium="email",
                utm_campaign="black-friday",
                utm_content="hero",
                utm_term="shoes",
            ),
            ("news", "email", "black-friday", "hero", "shoes"),
        ),
        # percent- and plus-encoding
        (f"{PAGE}?utm_campaign=Summer%20Sale%20%C3%A9t%C3%A9", ("", "", "Summer Sale été", "", "")),
        (f"{PAGE}?utm_term=red+shoes&utm_content=a%26b", ("", "", "", "a&b", "red shoes")),
        # repeated parameters: the first non-empty value
        (f"{PAGE}?utm_source=a&utm_source=b", ("a", "", "", "", "")),
        (f"{PAGE}?utm_source=&utm_source=b", ("b", "", "", "", "")),
        # names in any case; values keep theirs
        (f"{PAGE}?UTM_Source=NewsLetter&Utm_Medium=EMAIL", ("NewsLetter", "EMAIL", "", "", "")),
        # whitespace around a value is dropped; the fragment is not the query
        (f"{PAGE}?utm_source=%20x%20#utm_medium=y", ("x", "", "", "", "")),
        # other parameters and none at all
        (f"{PAGE}?ref=x&utm=1&source=y", ("", "", "", "", "")),
        (PAGE, ("", "", "", "", "")),
        ("", ("", "", "", "", "")),
        ("not a url ?utm_source=z", ("z", "", "", "", "")),
    ],
)
def test_utm(url: str, expected: tuple[str, ...]) -> None:
    got = acquire(url, "")
    assert (got.utm_source, got.utm_medium, got.utm_campaign, got.utm_content, got.utm_term) == (
        expected
    )


# --- channel ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "referrer", "channel"),
    [
        # 1 Direct
        (PAGE, "", "Direct"),
        (PAGE, "https://shop.example.com/other", "Direct"),
        # 2 Cross-network (before every source rule)
        (
            tagged(utm_source="google", utm_medium="cpc", utm_campaign="pmax cross-network"),
            "",
            "Cross-network",
        ),
        # 3 Paid Shopping: a shopping site, or a shopping campaign, with a paid medium
        (tagged(utm_source="amazon", utm_medium="cpc"), "", "Paid Shopping"),
        (
            tagged(utm_source="news", utm_medium="paid", utm_campaign="Shopping-Q4"),
            "",
            "Paid Shopping",
        ),
        (tagged(utm_source="google", utm_medium="ppc", utm_campaign="workshop"), "", "Paid Search"),
        # 4 Paid Search
        (tagged(utm_source="google", utm_medium="cpc"), "", "Paid Search"),
        (tagged(utm_source="bing", utm_medium="ppc"), "", "Paid Search"),
        (tagged(utm_source="www.google.de", utm_medium="paidsearch"), "", "Paid Search"),
        (f"{PAGE}?gclid=x", "https://www.google.com/", "Paid Search"),
        # 5 Paid Social
        (tagged(utm_source="facebook", utm_medium="paid_social"), "", "Paid Social"),
        (tagged(utm_source="ig", utm_medium="cpc"), "", "Paid Social"),
        (tagged(utm_source="linkedin.com", utm_medium="retargeting"), "", "Paid Social"),
        # 6 Paid Video
        (tagged(utm_source="youtube", utm_medium="cpv"), "", "Paid Video"),
        # 7 Display
        (tagged(utm_source="dv360", utm_medium="display"), "", "Display"),
        (tagged(utm_source="network", utm_medium="Banner"), "", "Display"),
        (tagged(utm_source="network", utm_medium="interstitial"), "", "Display"),
        (tagged(utm_source="youtube", utm_medium="cpm"), "", "Paid Video"),  # 6 before 7
        (tagged(utm_source="network", utm_medium="cpm"), "", "Display"),  # 7 before 8
        # 8 Paid Other
        (tagged(utm_source="partner", utm_medium="cpc"), "", "Paid Other"),
        (tagged(utm_source="partner", utm_medium="paid-listing"), "", "Paid Other"),
        # 9 Organic Shopping
        (PAGE, "https://www.ebay.de/itm/1", "Organic Shopping"),
        (tagged(utm_source="newsletter", utm_campaign="shop"), "", "Organic Shopping"),
        # 10 Organic Social
        (PAGE, "https://t.co/x", "Organic Social"),
        (PAGE, "https://www.linkedin.com/feed/", "Organic Social"),
        (tagged(utm_source="fb", utm_medium="post"), "", "Organic Social"),
        (tagged(utm_source="club", utm_medium="social-network"), "", "Organic Social"),
        (tagged(utm_source="club", utm_medium="SM"), "", "Organic Social"),
        # 11 Organic Video
        (PAGE, "https://www.youtube.com/watch?v=x", "Organic Video"),
        (tagged(utm_source="blog", utm_medium="video-embed"), "", "Organic Video"),
        # 12 Organic Search
        (PAGE, "https://www.google.com/", "Organic Search"),
        (PAGE, "https://www.bing.com/search?q=x", "Organic Search"),
        (PAGE, "https://duckduckgo.com/", "Organic Search"),
        (tagged(utm_source="directory", utm_medium="organic"), "", "Organic Search"),
        # 13 Email
        (tagged(utm_source="newsletter", utm_medium="email"), "", "Email"),
        (tagged(utm_source="e-mail", utm_medium="blast"), "", "Email"),
        (tagged(utm_source="crm", utm_medium="E_Mail"), "", "Email"),
        (tagged(utm_medium="e mail"), "", "Email"),
        (tagged(utm_source="email", utm_medium="affiliate"), "", "Email"),  # 13 before 14
        # 14 Affiliates
        (tagged(utm_source="partner", utm_medium="affiliate"), "", "Affiliates"),
        # 15 Referral
        (PAGE, "https://news.example.org/a", "Referral"),
        (PAGE, "https://mail.google.com/", "Referral"),
        (tagged(utm_source="partner", utm_medium="referral"), "", "Referral"),
        (tagged(utm_source="partner", utm_medium="app"), "", "Referral"),
        (tagged(utm_source="partner", utm_medium="link"), "", "Referral"),
        # 16 Audio
        (tagged(utm_source="spotify", utm_medium="audio"), "", "Audio"),
        # 17 SMS
        (tagged(utm_source="sms", utm_medium="text"), "", "SMS"),
        (tagged(utm_source="twilio", utm_medium="sms"), "", "SMS"),
        # 18 Mobile Push Notifications
        (tagged(utm_source="app", utm_medium="web-push"), "", "Mobile Push Notifications"),
        (tagged(utm_source="app", utm_medium="mobile-alert"), "", "Mobile Push Notifications"),
        (tagged(utm_source="firebase", utm_medium="x"), "", "Mobile Push Notifications"),
        # 19 nothing matched (GA4: Unassigned)
        (tagged(utm_source="partner"), "", "Other"),
        (tagged(utm_source="partner", utm_medium="qr"), "", "Other"),
    ],
)
def test_channel(url: str, referrer: str, channel: str) -> None:
    assert acquire(url, referrer).channel == channel


@pytest.mark.parametrize(
    ("source", "medium"),
    [
        ("email", "link"),
        ("e-mail", "app"),
        ("e_mail", "referral"),
        ("E Mail", "Link"),
        ("newsletter", "email"),
    ],
)
def test_email_comes_before_referral_in_ga4s_order(source: str, medium: str) -> None:
    # GA4's published order: ..., Organic Search, Email, Affiliates, Referral, Audio, ...
    assert acquire(tagged(utm_source=source, utm_medium=medium), "").channel == "Email"
    assert channel_of(source, medium, "", "") == "Email"


def test_channel_rules_follow_ga4s_published_order() -> None:
    """Each pair of rules a source / medium / campaign can match both of, in GA4's order."""
    expected = [
        ("(direct)", "(none)", "cross-network", "", "Direct"),
        ("google", "cpc", "cross-network shop", "search", "Cross-network"),
        ("amazon", "cpc", "", "shopping", "Paid Shopping"),
        ("google", "cpc", "shop", "search", "Paid Shopping"),
        ("google", "cpc", "", "search", "Paid Search"),
        ("facebook", "paid", "", "social", "Paid Social"),
        ("youtube", "cpm", "", "video", "Paid Video"),
        ("x", "cpm", "", "", "Display"),
        ("email", "cpc", "", "", "Paid Other"),
        ("amazon", "social", "", "shopping", "Organic Shopping"),
        ("facebook", "video", "", "social", "Organic Social"),
        ("youtube", "organic", "", "video", "Organic Video"),
        ("google", "email", "", "search", "Organic Search"),
        ("email", "affiliate", "", "", "Email"),
        ("email", "referral", "", "", "Email"),
        ("sms", "referral", "", "", "Referral"),
        ("firebase", "audio", "", "", "Audio"),
        ("sms", "mobile", "", "", "SMS"),
        ("firebase", "x", "", "", "Mobile Push Notifications"),
        ("x", "x", "", "", "Other"),
    ]
    got = [(*row[:4], channel_of(*row[:4])) for row in expected]
    assert got == expected


@pytest.mark.parametrize(
    ("url", "referrer", "source", "channel"),
    [
        # utm_campaign alone: source and channel both from the referrer, as if untagged
        (tagged(utm_campaign="spring"), "https://www.google.com/", "Google", "Organic Search"),
        (tagged(utm_campaign="spring"), "https://t.co/x", "Twitter", "Organic Social"),
        (
            tagged(utm_campaign="spring"),
            "https://news.example.org/",
            "news.example.org",
            "Referral",
        ),
        (tagged(utm_campaign="spring"), "", DIRECT, "Direct"),
        (f"{PAGE}?gclid=x&utm_campaign=spring", "", "Google", "Paid Search"),
        # ... the campaign still counts in the campaign rules
        (
            tagged(utm_campaign="summer-shop"),
            "https://www.google.com/",
            "Google",
            "Organic Shopping",
        ),
        (
            tagged(utm_campaign="x cross-network"),
            "https://www.google.com/",
            "Google",
            "Cross-network",
        ),
        # utm_medium without utm_source: the tagged medium decides, source (not set)
        (tagged(utm_medium="email"), "https://t.co/x", "Twitter", "Email"),
        (
            tagged(utm_medium="email", utm_campaign="spring"),
            "https://www.google.com/",
            "Google",
            "Email",
        ),
    ],
)
def test_channel_agrees_with_the_stored_source(url, referrer, source, channel) -> None:
    got = acquire(url, referrer)
    assert (got.source, got.channel) == (source, channel)


@pytest.mark.parametrize(
    ("referrer", "source", "channel"),
    [
        ("android-app://com.google.android.googlequicksearchbox/", "Google", "Organic Search"),
        ("android-app://com.google.android.googlequicksearchbox/https/www.google.com/",
         "Google", "Organic Search"),
        # Gmail is a referral on the web (mail.google.com) and in its app: GA4's Email rule
        # reads utm source / medium only
        ("android-app://com.google.android.gm/", "Gmail", "Referral"),
        ("android-app://com.linkedin.android/", "LinkedIn", "Organic Social"),
        ("android-app://com.facebook.katana/", "Facebook", "Organic Social"),
        ("android-app://com.instagram.android/", "Instagram", "Organic Social"),
        ("android-app://com.twitter.android/", "Twitter", "Organic Social"),
        ("android-app://com.reddit.frontpage/", "Reddit", "Organic Social"),
        ("android-app://com.Slack/", "Slack", "Organic Social"),
        ("android-app://org.telegram.messenger/", "Telegram", "Organic Social"),
        ("android-app://com.whatsapp/", "WhatsApp", "Organic Social"),
        ("android-app://com.google.android.youtube/", "YouTube", "Organic Video"),
        ("ANDROID-APP://com.linkedin.android/", "LinkedIn", "Organic Social"),
        # an app not in the table: its package, a referral
        ("android-app://com.example.reader/", "com.example.reader", "Referral"),
        # a web host spelled like a package is a web host
        ("https://com.google.android.gm/", "com.google.android.gm", "Referral"),
    ],
)  # fmt: skip
def test_android_app_referrers(referrer: str, source: str, channel: str) -> None:
    got = acquire(PAGE, referrer)
    assert (got.source, got.channel) == (source, channel)


def test_channel_rules_compare_case_insensitively() -> None:
    assert channel_of("(DIRECT)", "(None)", "", "") == "Direct"
    assert channel_of("x", "CPC", "", "search") == "Paid Search"
    assert channel_of("x", "Organic", "", "") == "Organic Search"


def test_medium_regexes_match_the_whole_value() -> None:
    # ^(.*cp.*|ppc|retargeting|paid.*)$: "paid" must start the medium, "ppc" be all of it
    assert channel_of("x", "unpaid", "", "") == "Other"
    assert channel_of("x", "ppc-test", "", "") == "Other"
    assert channel_of("x", "acpx", "", "") == "Paid Other"
    # the shopping campaign regex: "shop" at the start or after a character outside a-d, f-z
    assert channel_of("x", "", "workshop", "") == "Other"
    assert channel_of("x", "", "e-shop", "") == "Organic Shopping"
    assert channel_of("x", "", "eshop", "") == "Organic Shopping"  # "e" is allowed before it


# --- the referrer table -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("host", "name"),
    [
        ("www.google.com", "Google"),
        ("google.de", "Google"),
        ("google.co.jp", "Google"),
        ("shopping.google.com", "Google Shopping"),
        ("t.co", "Twitter"),
        ("lm.facebook.com", "Facebook"),
        ("facebook.de", "Facebook"),
        ("yahoo.co.jp", "Yahoo!"),
        ("search.yahoo.co.jp", "Yahoo! Japan"),
        ("en.wikipedia.org", "Wikipedia"),
        ("google.example.com", None),
        ("example.google", None),
        ("co.uk", None),
        ("", None),
    ],
)
def test_lookup_host(host: str, name: str | None) -> None:
    site = lookup_host(host)
    assert (site.name if site else None) == name


def test_lookup_source_knows_short_names() -> None:
    assert lookup_source("fb").name == "Facebook"
    assert lookup_source("IG").name == "Instagram"
    assert lookup_source("www.bing.com").name == "Bing"
    assert lookup_source("newsletter") is None

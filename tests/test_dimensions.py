"""Country (domain/geo.py), bots (domain/bots.py), and every dimension column as stored by
POST /api/collect (schema 005)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import auth, new_project, stored
from tally.domain.bots import is_bot
from tally.domain.geo import UNKNOWN, CountryReader, packaged_db

GOOGLEBOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
LG_WEBOS_TV = (
    "Mozilla/5.0 (Web0S; Linux/SmartTV) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/79.0.3945.79 Safari/537.36 WebAppManager"
)
CHROME = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/126.0.0.0 Safari/537.36"
)


# --- country ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def geo() -> CountryReader:
    return CountryReader()


@pytest.mark.parametrize(
    ("ip", "country"),
    [
        ("8.8.8.8", "US"),  # Google Public DNS
        ("1.1.1.1", "AU"),  # APNIC/Cloudflare's research prefix, registered in Australia
        ("81.2.69.142", "GB"),  # MaxMind's own test-data address
        ("193.0.6.139", "NL"),  # RIPE NCC, Amsterdam
        ("2a00:1450:4001:80b::200e", "DE"),  # Google, Frankfurt
        ("::ffff:8.8.8.8", "US"),  # IPv4-mapped, as a dual-stack socket reports it
        ("::ffff:5102:458e", "GB"),  # the same, in hex: 81.2.69.142
        ("::FFFF:0808:0808", "US"),
        ("0:0:0:0:0:ffff:808:808", "US"),
        ("::ffff:a00:1", UNKNOWN),  # 10.0.0.1, private
        ("10.0.0.1", UNKNOWN),  # private
        ("192.168.1.20", UNKNOWN),
        ("127.0.0.1", UNKNOWN),
        ("::1", UNKNOWN),
        ("fd00::1", UNKNOWN),  # unique local
        ("testclient", UNKNOWN),  # not an address (the test client's peer)
        ("", UNKNOWN),
        ("999.1.1.1", UNKNOWN),
    ],
)
def test_country_of_well_known_addresses(geo: CountryReader, ip: str, country: str) -> None:
    assert geo.country(ip) == country


def test_packaged_database_is_dbip_country_lite_with_its_license() -> None:
    path = packaged_db()
    assert path.is_file()
    licence = (path.parent / "DBIP-LICENSE").read_text()
    assert "Creative Commons Attribution 4.0" in licence and "db-ip.com" in licence.lower()
    assert CountryReader(path).build_epoch > 1_767_225_600  # built in 2026 or later


def write_mmdb(path: Path) -> Path:
    """A two-network MaxMind DB in GeoIP2-Country's record shape."""
    from mmdb_writer import MMDBWriter
    from netaddr import IPSet

    writer = MMDBWriter(ip_version=6, database_type="GeoIP2-Country", ipv4_compatible=True)
    writer.insert_network(IPSet(["8.8.8.0/24"]), {"country": {"iso_code": "fr"}})
    writer.insert_network(IPSet(["2001:db8::/32"]), {"registered_country": {"iso_code": "JP"}})
    writer.to_db_file(str(path))
    return path


def test_another_database_in_maxmind_shape(tmp_path: Path) -> None:
    geo = CountryReader(write_mmdb(tmp_path / "own.mmdb"))
    assert geo.country("8.8.8.8") == "FR"  # not the packaged US: this file is the one read
    assert geo.country("2001:db8::5") == "JP"
    assert geo.country("1.1.1.1") == UNKNOWN


def test_a_file_that_is_not_a_database_is_refused_in_plain_words(tmp_path: Path) -> None:
    bad = tmp_path / "bad.mmdb"
    bad.write_bytes(b"not a database")
    with pytest.raises(ValueError, match="cannot open the IP-to-country database"):
        CountryReader(bad)


def test_geoip_setting_must_name_a_file(tmp_path: Path) -> None:
    from tally.config import load_settings

    with pytest.raises(SystemExit, match="TALLY_GEOIP_DB"):
        load_settings({"TALLY_GEOIP_DB": str(tmp_path / "missing.mmdb")}, env_file=None)
    path = write_mmdb(tmp_path / "ok.mmdb")
    assert load_settings({"TALLY_GEOIP_DB": str(path)}, env_file=None).geoip_db == str(path)


# --- bots -------------------------------------------------------------------------------------
BOTS = {
    "Googlebot": GOOGLEBOT,
    "Googlebot smartphone": "Mozilla/5.0 (Linux; Android 6.0.1; Nexus 5X Build/MMB29P) "
    "AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.6478.126 Mobile Safari/537.36 "
    "(compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "bingbot": "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
    "HeadlessChrome": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "HeadlessChrome/126.0.0.0 Safari/537.36",
    "UptimeRobot": "Mozilla/5.0+(compatible; UptimeRobot/2.0; http://www.uptimerobot.com/)",
    "Pingdom": "Pingdom.com_bot_version_1.4_(http://www.pingdom.com/)",
    "AhrefsBot": "Mozilla/5.0 (compatible; AhrefsBot/7.0; +http://ahrefs.com/robot/)",
    "GPTBot": "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.2; "
    "+https://openai.com/gptbot)",
    "Lighthouse": CHROME + " Chrome-Lighthouse",
    "facebookexternalhit": "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)",
    "Yandex": "Mozilla/5.0 (compatible; YandexBot/3.0; +http://yandex.com/bots)",
    "crawler using requests": "python-requests/2.32.3 (compatible; ExampleCrawler/1.0)",
    "monitor using okhttp": "okhttp/3.12.1 UptimeRobot",
    "crawler using Java": "Java/17 Googlebot",
    # isbot's "manager" (once "bordermanager"): every one but LG webOS's WebAppManager
    "BorderManager": "Mozilla/4.0 (compatible; BorderManager 3.0)",
    "Cloudflare-Traffic-Manager": "Mozilla/5.0 (compatible; Cloudflare-Traffic-Manager/1.0; "
    "+https://www.cloudflare.com/traffic-manager/; pool-id: AAAAAAAAAAAAAAAA)",
    "Bookmark Manager": "Mozilla/5.0 (compatible; LinkStash Bookmark Manager; "
    "http://www.xrayz.co.uk/)",
    "GoogleTagManager": "GoogleTagManager/5.06 (Linux; U; Android 13; ru-ru; SM-A137F "
    "Build/TP1A.220624.014)",
}
NOT_BOTS = {
    "curl": "curl/8.5.0",
    "python-requests": "python-requests/2.32.3",
    "httpx": "python-httpx/0.27.0",
    "Go-http-client": "Go-http-client/1.1",
    "Go-http-client 2": "Go-http-client/2.0",
    "okhttp": "okhttp/4.12.0",
    "node-fetch": "node-fetch/1.0 (+https://github.com/bitinn/node-fetch)",
    "node-fetch bare": "node-fetch",
    "axios": "axios/1.7.2",
    # ua-parser calls these a Spider, isbot a bot: they are libraries and tools all the same.
    "Python-urllib": "Python-urllib/3.11",
    "urllib3": "python-urllib3/2.2.2",
    "Java": "Java/1.8.0_292",
    "WinHttp": "WinHttp",
    "libwww-perl": "libwww-perl/6.67",
    "HTTPie": "HTTPie/3.2.2",
    "PostmanRuntime": "PostmanRuntime/7.36.0",
    "PHP": "PHP/8.2",
    "a bare product token": "MyApp/2.1",
    "Chrome Windows": CHROME,
    "Edge": CHROME + " Edg/126.0.0.0",
    "Firefox": "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
    "Safari macOS": "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/17.5 Safari/605.1.15",
    "Safari iPhone": "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15"
    " (KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1",
    "Chrome Android": "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like "
    "Gecko) Chrome/126.0.6478.122 Mobile Safari/537.36",
    "Samsung Internet": "Mozilla/5.0 (Linux; Android 14; SM-S918B) AppleWebKit/537.36 (KHTML, "
    "like Gecko) SamsungBrowser/25.0 Chrome/121.0.0.0 Mobile Safari/537.36",
    "Google app on iOS": "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) "
    "AppleWebKit/605.1.15 (KHTML, like Gecko) GSA/322.0.648915268 Mobile/15E148 Safari/604.1",
    "LG webOS TV": LG_WEBOS_TV,
    "LG webOS TV, older": "Mozilla/5.0 (Web0S; Linux/SmartTV) AppleWebKit/538.2 (KHTML, like "
    "Gecko) Large Screen WebAppManager Safari/538.2",
    "Litestar's test client": "testclient",
    "none": "",
}


@pytest.mark.parametrize("ua", BOTS.values(), ids=BOTS.keys())
def test_bots(ua: str) -> None:
    assert is_bot(ua)


@pytest.mark.parametrize("ua", NOT_BOTS.values(), ids=NOT_BOTS.keys())
def test_not_bots(ua: str) -> None:
    assert not is_bot(ua)


# --- end to end: stored by POST /api/collect ---------------------------------------------------
COLUMNS = (
    "source, channel, utm_source, utm_medium, utm_campaign, utm_content, utm_term, country, is_bot"
)


def collect(client, key: str, events: list[dict], **headers: str):
    response = client.post(
        "/api/collect",
        content=json.dumps({"events": events}),
        headers={"content-type": "application/json", "x-api-key": key, **headers},
    )
    assert response.status_code == 202, response.text
    return response


def dimensions(client, project_id: str) -> list[tuple]:
    return stored(
        client,
        f"SELECT name, {COLUMNS} FROM {{db}}.events WHERE project_id = {{p:String}} ORDER BY name",
        p=project_id,
    )


def test_collect_stores_every_dimension(client) -> None:
    project_id, key = new_project(client)
    collect(
        client,
        key,
        [
            {
                "name": "a_campaign",
                "url": "https://shop.example.com/?utm_source=Newsletter&utm_medium=email"
                "&utm_campaign=Black%20Friday&utm_content=hero&utm_term=red+shoes",
                "referrer": "https://mail.google.com/",
            },
            {
                "name": "b_search",
                "url": "https://shop.example.com/p",
                "referrer": "https://www.google.de/",
            },
            {
                "name": "c_internal",
                "url": "https://shop.example.com/b",
                "referrer": "https://shop.example.com/a",
            },
            {"name": "d_direct", "path": "/"},
            {"name": "e_social", "url": "https://shop.example.com/", "referrer": "https://t.co/x"},
        ],
        **{"x-forwarded-for": "8.8.8.8", "user-agent": CHROME},
    )
    assert dimensions(client, project_id) == [
        ("a_campaign", "Newsletter", "Email", "Newsletter", "email", "Black Friday", "hero",
         "red shoes", "US", 0),
        ("b_search", "Google", "Organic Search", "", "", "", "", "", "US", 0),
        ("c_internal", "Direct / None", "Direct", "", "", "", "", "", "US", 0),
        ("d_direct", "Direct / None", "Direct", "", "", "", "", "", "US", 0),
        ("e_social", "Twitter", "Organic Social", "", "", "", "", "", "US", 0),
    ]  # fmt: skip


def test_collect_flags_bots_and_keeps_http_libraries(client) -> None:
    project_id, key = new_project(client)
    collect(client, key, [{"name": "a_bot"}], **{"user-agent": GOOGLEBOT})
    collect(client, key, [{"name": "b_curl"}], **{"user-agent": "curl/8.5.0"})
    collect(client, key, [{"name": "c_requests"}], **{"user-agent": "python-requests/2.32.3"})
    # ua-parser's Spider class holds these two; they are libraries, and count.
    collect(client, key, [{"name": "d_urllib"}], **{"user-agent": "Python-urllib/3.11"})
    collect(client, key, [{"name": "e_java"}], **{"user-agent": "Java/1.8.0_292"})
    rows = stored(
        client,
        "SELECT name, is_bot, device_type = 'bot', country FROM {db}.events "
        "WHERE project_id = {p:String} ORDER BY name",
        p=project_id,
    )
    # the test client's peer address is "testclient": no country
    assert rows == [
        ("a_bot", 1, 1, "Unknown"),
        ("b_curl", 0, 0, "Unknown"),
        ("c_requests", 0, 0, "Unknown"),
        ("d_urllib", 0, 0, "Unknown"),
        ("e_java", 0, 0, "Unknown"),
    ]
    summary = client.get(f"/api/dashboard?projectId={project_id}", headers=auth("alice")).json()[
        "summary"
    ]
    assert (summary["totalEvents"], summary["botEvents"]) == (4, 1)


def test_country_is_resolved_before_the_ip_is_hashed(make_client) -> None:
    with make_client(ip_privacy="hash") as client:
        project_id, key = new_project(client)
        collect(client, key, [{"name": "e"}], **{"x-forwarded-for": "81.2.69.142"})
        ((ip, country),) = stored(
            client,
            "SELECT ip, country FROM {db}.events WHERE project_id = {p:String}",
            p=project_id,
        )
        assert country == "GB"
        assert ip != "81.2.69.142" and len(ip) == 32  # the hash, not the address


def test_geoip_db_setting_is_the_database_used(make_client, tmp_path: Path) -> None:
    path = write_mmdb(tmp_path / "own.mmdb")
    with make_client(geoip_db=str(path)) as client:
        project_id, key = new_project(client)
        collect(client, key, [{"name": "a"}], **{"x-forwarded-for": "8.8.8.8"})
        collect(client, key, [{"name": "b"}], **{"x-forwarded-for": "2001:db8::7"})
        collect(client, key, [{"name": "c"}], **{"x-forwarded-for": "81.2.69.142"})
        rows = stored(
            client,
            "SELECT name, country FROM {db}.events WHERE project_id = {p:String} ORDER BY name",
            p=project_id,
        )
        assert rows == [("a", "FR"), ("b", "JP"), ("c", "Unknown")]


def test_dashboard_page_credits_db_ip_as_its_license_asks(client) -> None:
    page = client.get("/").text
    assert '<a href="https://db-ip.com">IP Geolocation by DB-IP</a>' in page


def test_enrichment_benchmark_runs() -> None:
    from benchmarks.enrichment import measure

    figures = measure(number=20)
    assert "classify + is_bot, new User-Agent" in figures
    assert all(value > 0 for value in figures.values())


DEVICE_TYPES = {
    # A phone brand holding "bot": a person's phone, counted, and a phone in deviceType.
    "Cubot phone": (
        "Mozilla/5.0 (Linux; Android 10; CUBOT_X30) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/120.0.0.0 Mobile Safari/537.36",
        "mobile",
        0,
    ),
    # isbot's headless browser, which ua-parser calls a desktop browser: a bot in both columns.
    "HeadlessChrome": (BOTS["HeadlessChrome"], "bot", 1),
    "Googlebot": (GOOGLEBOT, "bot", 1),
    "Python-urllib": ("Python-urllib/3.11", "Unknown", 0),
    # a TV's browser: counted (ua-parser's device class for it is its desktop default)
    "LG webOS TV": (LG_WEBOS_TV, "desktop", 0),
    "Firefox": (NOT_BOTS["Firefox"], "desktop", 0),
    # A browser on an Android tablet does not say "Mobile"; an Android app's own HTTP stack
    # never does, on a phone too (a Galaxy S23 Ultra's was counted as a tablet).
    "Chrome on an Android tablet": (
        "Mozilla/5.0 (Linux; Android 14; SM-X700) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/120.0.0.0 Safari/537.36",
        "tablet",
        0,
    ),
    "Android app (Dalvik)": (
        "Dalvik/2.1.0 (Linux; U; Android 14; SM-S918B Build/UP1A.231005.007)",
        "mobile",
        0,
    ),
}


@pytest.mark.parametrize(
    ("ua", "device_type", "bot"), DEVICE_TYPES.values(), ids=DEVICE_TYPES.keys()
)
def test_device_type_is_bot_exactly_when_the_event_is_a_bots(client, ua, device_type, bot):
    project_id, key = new_project(client)
    collect(client, key, [{"name": "e"}], **{"user-agent": ua})
    rows = stored(
        client,
        "SELECT device_type, is_bot FROM {db}.events WHERE project_id = {p:String}",
        p=project_id,
    )
    assert rows == [(device_type, bot)]


def test_metadata_device_type_never_contradicts_the_bot_rule(client) -> None:
    """``bot`` in device_type exactly when is_bot is 1, whatever metadata.deviceType says."""
    project_id, key = new_project(client)
    collect(
        client,
        key,
        [{"name": "a", "metadata": {"deviceType": "desktop"}}],
        **{"user-agent": GOOGLEBOT},
    )
    collect(
        client, key, [{"name": "b", "metadata": {"deviceType": "bot"}}], **{"user-agent": CHROME}
    )
    collect(
        client,
        key,
        [{"name": "c", "metadata": {"deviceType": "Bot"}}],
        **{"user-agent": NOT_BOTS["Safari iPhone"]},
    )
    collect(
        client,
        key,
        [{"name": "d", "metadata": {"deviceType": "tv"}}],
        **{"user-agent": LG_WEBOS_TV},
    )
    collect(
        client,
        key,
        [{"name": "e", "metadata": {"deviceType": "bot"}}],
        **{"user-agent": BOTS["HeadlessChrome"]},
    )
    rows = stored(
        client,
        "SELECT name, device_type, is_bot FROM {db}.events WHERE project_id = {p:String} "
        "ORDER BY name",
        p=project_id,
    )
    assert rows == [
        ("a", "bot", 1),
        ("b", "desktop", 0),  # the User-Agent's device type
        ("c", "mobile", 0),
        ("d", "tv", 0),  # any other metadata.deviceType is kept
        ("e", "bot", 1),
    ]  # fmt: skip


def test_collect_stores_channel_and_source_by_ga4s_rules(client) -> None:
    """Email before Referral, android-app referrers, a campaign-only tag: as stored."""
    page = "https://shop.example.com/landing"
    project_id, key = new_project(client)
    collect(
        client,
        key,
        [
            {"name": "a_email_link", "url": page + "?utm_source=email&utm_medium=link"},
            {"name": "b_email_app", "url": page + "?utm_source=e-mail&utm_medium=app"},
            {
                "name": "c_google_app",
                "url": page,
                "referrer": "android-app://com.google.android.googlequicksearchbox/",
            },
            {
                "name": "d_gmail_app",
                "url": page,
                "referrer": "android-app://com.google.android.gm/",
            },
            {
                "name": "e_linkedin_app",
                "url": page,
                "referrer": "android-app://com.linkedin.android/",
            },
            {
                "name": "f_campaign_only",
                "url": page + "?utm_campaign=spring",
                "referrer": "https://www.google.com/",
            },
        ],
        **{"user-agent": CHROME},
    )
    rows = stored(
        client,
        "SELECT name, source, channel, utm_campaign FROM {db}.events "
        "WHERE project_id = {p:String} ORDER BY name",
        p=project_id,
    )
    assert rows == [
        ("a_email_link", "email", "Email", ""),
        ("b_email_app", "e-mail", "Email", ""),
        ("c_google_app", "Google", "Organic Search", ""),
        ("d_gmail_app", "Gmail", "Referral", ""),
        ("e_linkedin_app", "LinkedIn", "Organic Social", ""),
        ("f_campaign_only", "Google", "Organic Search", "spring"),
    ]  # fmt: skip


def test_country_of_an_ipv4_mapped_address_in_any_spelling(client) -> None:
    project_id, key = new_project(client)
    collect(client, key, [{"name": "a"}], **{"x-forwarded-for": "::ffff:81.2.69.142"})
    collect(client, key, [{"name": "b"}], **{"x-forwarded-for": "::ffff:5102:458e"})
    collect(client, key, [{"name": "c"}], **{"x-forwarded-for": "::FFFF:5102:458E"})
    rows = stored(
        client,
        "SELECT name, country FROM {db}.events WHERE project_id = {p:String} ORDER BY name",
        p=project_id,
    )
    assert rows == [("a", "GB"), ("b", "GB"), ("c", "GB")]

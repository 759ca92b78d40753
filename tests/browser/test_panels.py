"""The dashboard page's panels in a real browser: headless Chromium against a real `tally serve`,
with real events sent through /api/collect (user agents of people's browsers, addresses in
several countries, UTM-tagged landings, a search engine's referrer, a crawler).

Each breakdown panel must show exactly the rows /api/breakdown answers for the same view; the
world map draws with no request leaving Tally's origin; clicking a row filters the dashboard (the
filter lands in the URL and every panel follows it); live visitors come from /api/live, not a
whole dashboard; "Today" is drawn as its hours; a phone's width shows the recent events whole.
"""

# The fixtures (tally, browser, watch) are test_site_owner's, imported: pytest finds them here,
# and the tests' parameters of the same names are what F811 would call redefinitions.
# ruff: noqa: F811

from __future__ import annotations

import json
import re
import uuid
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from test_filters_page import click_chart
from test_site_owner import (  # noqa: F401 - fixtures
    ARTIFACTS,
    BROWSER_TESTS,
    DESKTOP,
    FAILED_LOAD,
    browser,
    headers,
    screenshot,
    tally,
    wait_until,
    watch,
)

pytestmark = BROWSER_TESTS

ZONE = "Asia/Kathmandu"
PHONE_375 = {"width": 375, "height": 740}
CHROME = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Safari/537.36"
)
IPHONE = (
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1"
)
FIREFOX = "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"
GOOGLEBOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
LONG_PATH = "/blog/" + "a-very-long-article-title-that-goes-on-" * 4 + "end"

# Every panel and its tabs: (panel id, breakdown dimension, limit the page asks for).
TABS = [
    ("sources", "source", 10),
    ("sources", "channel", 10),
    ("sources", "utmCampaign", 10),
    ("sources", "utmSource", 10),
    ("sources", "utmMedium", 10),
    ("sources", "referrer", 10),
    ("pages", "path", 10),
    ("countries", "country", 250),
    ("entry-exit", "entryPage", 10),
    ("entry-exit", "exitPage", 10),
    ("os", "os", 10),
    ("browsers", "browser", 10),
    ("devices", "deviceType", 10),
]


def send(tally: str, key: str, ip: str, agent: str, *events: dict[str, Any]) -> None:
    response = httpx.post(
        f"{tally}/api/collect",
        json={"events": list(events)},
        headers={"x-api-key": key, "x-forwarded-for": ip, "user-agent": agent},
    )
    assert response.status_code == 202, response.text


def traffic(tally: str, key: str) -> None:
    """Three people in three countries and a crawler, today."""
    landing = "https://shop.example/?utm_source=news&utm_medium=email&utm_campaign=spring"
    v1 = {"visitorId": "v1", "sessionId": "s1"}
    send(
        tally,
        key,
        "8.8.8.8",
        CHROME,
        {"name": "pageview", "path": "/", "url": landing, **v1},
        {"name": "pageview", "path": "/pricing", "url": "https://shop.example/pricing", **v1},
        {"name": "signup", "path": "/pricing", **v1},
        {"name": "session_end", "metadata": {"durationMs": 754_000}, **v1},
    )
    v2 = {"visitorId": "v2", "sessionId": "s2"}
    send(
        tally,
        key,
        "193.99.144.80",
        IPHONE,
        {
            "name": "pageview",
            "path": LONG_PATH,
            "url": "https://shop.example" + LONG_PATH,
            "referrer": "https://www.google.com/search?q=shop",
            **v2,
        },
        {"name": "pageview", "path": "/", "url": "https://shop.example/", **v2},
    )
    send(
        tally,
        key,
        "1.1.1.1",
        FIREFOX,
        {
            "name": "pageview",
            "path": "/",
            "url": "https://shop.example/",
            "referrer": "https://news.example.org/x",
            "visitorId": "v3",
            "sessionId": "s3",
        },
    )
    send(tally, key, "133.242.0.3", GOOGLEBOT, {"name": "pageview", "path": "/", "visitorId": "b"})


@pytest.fixture(scope="module")
def shop(tally: str) -> tuple[str, str]:
    """(user, project id) of a Kathmandu project with the traffic above, loaded."""
    user = f"owner-{uuid.uuid4().hex[:8]}"
    made = httpx.post(
        f"{tally}/api/projects", json={"name": "Panels", "timezone": ZONE}, headers=headers(user)
    )
    assert made.status_code == 201, made.text
    project_id, key = made.json()["projectId"], made.json()["apiKey"]
    traffic(tally, key)
    wait_until(lambda: dash_api(tally, user, project_id)["summary"]["totalEvents"] == 7, "events")
    return user, project_id


def dash_api(tally: str, user: str, project_id: str, **params: Any) -> dict[str, Any]:
    response = httpx.get(
        f"{tally}/api/dashboard",
        params={"projectId": project_id, "days": 7, **params},
        headers=headers(user),
        timeout=10,
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def breakdown_api(tally: str, user: str, project_id: str, **params: Any) -> list[list[str]]:
    """The rows as the page shows them: [value, visitors, pageviews]."""
    response = httpx.get(
        f"{tally}/api/breakdown",
        params={"projectId": project_id, **params},
        headers=headers(user),
        timeout=10,
    )
    assert response.status_code == 200, response.text
    return [
        [r["value"], f"{r['visitors']:,}", f"{r['pageviews']:,}"] for r in response.json()["rows"]
    ]


def shown(page: Any, by: str) -> list[list[str]]:
    """A breakdown table's rows: [the value it filters by, visitors, pageviews]."""
    rows: list[list[str]] = page.eval_on_selector_all(
        f"[data-testid=breakdown-{by}] tbody tr",
        "rows => rows.map(r => [r.dataset.filterValue, r.cells[1].textContent, "
        "r.cells[2].textContent])",
    )
    return rows


def ready(page: Any, panel: str, by: str) -> None:
    page.wait_for_selector(f"[data-panel={panel}][data-by={by}][data-state=ready]")


def open_dashboard(page: Any, tally: str, user: str, query: str) -> None:
    from conftest import token

    page.goto(f"{tally}/?{query}#token={token(user)}")
    page.wait_for_selector("#summary")


class Requests:
    """Every request a browser context makes."""

    def __init__(self, context: Any) -> None:
        self.urls: list[str] = []
        context.on("request", lambda r: self.urls.append(r.url))

    def outside(self, origin: str) -> list[str]:
        return [u for u in self.urls if not (u.startswith(origin + "/") or u.startswith("data:"))]

    def count(self, part: str) -> int:
        return sum(part in u for u in self.urls)


def test_every_panel_shows_what_the_api_answers_and_the_map_stays_home(tally, shop, browser, watch):
    user, project_id = shop
    context = browser.new_context(viewport=DESKTOP)
    requests = Requests(context)
    page = watch(context.new_page())
    open_dashboard(page, tally, user, f"project={project_id}")
    for panel, by, limit in TABS:
        if page.locator(f"[data-panel={panel}] button[data-by={by}]").count():
            page.click(f"[data-panel={panel}] button[data-by={by}]")
        ready(page, panel, by)
        expected = breakdown_api(tally, user, project_id, by=by, days=7, limit=limit)
        assert shown(page, by) == expected, by
        assert expected, f"{by}: the test is not vacuous"
    # Country codes filter; the rows show the countries' names.
    assert sorted(r[0] for r in shown(page, "country")) == ["AU", "DE", "US"]
    names = page.eval_on_selector_all(
        "[data-testid=breakdown-country] tbody tr", "rows => rows.map(r => r.cells[0].textContent)"
    )
    assert sorted(names) == ["Australia", "Germany", "United States"]

    # The world map: every country with visitors drawn, its shapes from Tally's own origin.
    page.wait_for_function(
        "() => document.querySelectorAll('[data-chart=countries] path.choroplethlocation').length"
        " >= 3"
    )
    assert requests.count("/assets/world_110m.json") == 1
    assert requests.outside(tally) == []

    # A long path is cut with an ellipsis on one line; its whole value is in the title.
    page.click("[data-panel=entry-exit] [data-by=entryPage]")
    ready(page, "entry-exit", "entryPage")
    cell = page.locator(f"[data-testid=breakdown-entryPage] td[title='{LONG_PATH}']")
    box = cell.evaluate(
        "c => [c.scrollWidth > c.clientWidth, getComputedStyle(c).textOverflow, "
        "c.getClientRects().length]"
    )
    assert box == [True, "ellipsis", 1]

    # The zone named, the heatmap in local hours, bots left out as a number.
    assert page.text_content("[data-testid=zone-note]") == f"Days and hours in {ZONE}."
    assert "UTC" not in page.text_content(".controls")
    assert page.get_attribute("[data-testid=bot-events]", "data-value") == "1"
    assert page.text_content("[data-testid=bot-events]").startswith("1 bot event left out")
    page.wait_for_selector("[data-chart=heatmap] .xtitle")
    assert page.text_content("[data-chart=heatmap] .xtitle") == f"local hour of day ({ZONE})"
    # session_end is not an event by name; it is said how many were left out, and why.
    events = page.eval_on_selector_all(
        "[data-testid=event-breakdown] tbody tr", "rows => rows.map(r => r.cells[0].textContent)"
    )
    assert sorted(events) == ["pageview", "signup"]
    assert "1 session_end event" in page.text_content("[data-testid=session-ends]")
    # "Avg. session" (754 s) on one line.
    value = page.locator("[data-metric=avgSessionDurationMs] .value")
    assert value.text_content() == "12m 34s"
    assert value.evaluate("v => v.getClientRects().length") == 1
    # The attribution DB-IP's licence asks for, once: in the page's footer.
    assert page.locator("footer a[href='https://db-ip.com']").count() == 1
    assert page.locator("a[href='https://db-ip.com']").count() == 1
    screenshot(page, "panels-desktop.png")
    context.close()
    watch.assert_clean()


def test_clicking_a_row_filters_the_whole_dashboard(tally, shop, browser, watch):
    user, project_id = shop
    context = browser.new_context(viewport=DESKTOP)
    page = watch(context.new_page())
    open_dashboard(page, tally, user, f"project={project_id}")
    ready(page, "countries", "country")
    page.click("[data-testid=breakdown-country] tr[data-filter-value=DE]")
    page.wait_for_url(lambda url: "filters=" in url)
    filters = json.loads(parse_qs(urlsplit(page.url).query)["filters"][0])
    assert filters == [["is", "country", ["DE"]]]
    # Every panel follows the filter: the source panel shows Germany's visit only.
    ready(page, "sources", "source")
    expected = breakdown_api(
        tally, user, project_id, by="source", days=7, limit=10, filters=json.dumps(filters)
    )
    assert shown(page, "source") == expected == [["Google", "1", "2"]]
    assert page.get_attribute("[data-metric=uniqueVisitors]", "data-value") == "1"

    # A country on the map filters too: a click in the middle of Australia.
    page.goto(f"{tally}/?project={project_id}")
    page.wait_for_selector("[data-chart=countries] path.choroplethlocation")
    index = page.eval_on_selector(
        "[data-chart=countries]", "el => el.data[0].locations.indexOf('AUS')"
    )
    page.locator("[data-chart=countries]").scroll_into_view_if_needed()
    australia = page.locator("[data-chart=countries] path.choroplethlocation").nth(index)
    # plotly picks the country under the pointer on hover
    assert "Australia" in click_chart(
        page,
        "countries",
        australia,
        lambda url: "AU" in parse_qs(urlsplit(url).query).get("filters", [""])[0],
    )
    filters = json.loads(parse_qs(urlsplit(page.url).query)["filters"][0])
    assert filters == [["is", "country", ["AU"]]]
    page.goto(f"{tally}/?project={project_id}&filters={json.dumps([['is', 'country', ['DE']]])}")
    ready(page, "sources", "source")
    # A source row adds its filter to the country's.
    page.click("[data-testid=breakdown-source] tr[data-filter-value=Google]")
    page.wait_for_url(lambda url: "source" in parse_qs(urlsplit(url).query).get("filters", [""])[0])
    filters = json.loads(parse_qs(urlsplit(page.url).query)["filters"][0])
    assert filters == [["is", "country", ["DE"]], ["is", "source", ["Google"]]]
    ready(page, "pages", "path")
    expected = breakdown_api(
        tally, user, project_id, by="path", days=7, limit=10, filters=json.dumps(filters)
    )
    assert shown(page, "path") == expected and len(expected) == 2
    context.close()
    watch.assert_clean()


def test_a_failing_panel_fails_alone_and_retries(tally, shop, browser, watch):
    user, project_id = shop
    context = browser.new_context(viewport=DESKTOP)
    page = watch(context.new_page())
    refused = re.compile(r".*/api/breakdown\?.*by=os.*")
    page.route(
        refused,
        lambda route: route.fulfill(
            status=503, content_type="application/json", body='{"error":"Storage unavailable"}'
        ),
    )
    open_dashboard(page, tally, user, f"project={project_id}")
    page.wait_for_selector("[data-panel=os][data-state=error]")
    assert "storage is unavailable" in page.text_content("[data-panel=os] [role=alert]")
    for panel, by, _ in TABS:
        if panel in ("os", "sources", "entry-exit") and by not in ("source", "entryPage"):
            continue
        ready(page, panel, by)  # every other panel, the cards and the charts are there
    assert page.get_attribute("[data-metric=totalEvents]", "data-value") == "7"
    page.unroute(refused)
    page.click("[data-panel=os] button:has-text('Try again')")
    ready(page, "os", "os")
    assert shown(page, "os") == breakdown_api(tally, user, project_id, by="os", days=7, limit=10)
    context.close()
    watch.assert_clean(FAILED_LOAD.format(503))


def test_live_visitors_come_from_api_live(tally, browser, watch):
    user = f"owner-{uuid.uuid4().hex[:8]}"
    made = httpx.post(f"{tally}/api/projects", json={"name": "Live"}, headers=headers(user))
    project_id, key = made.json()["projectId"], made.json()["apiKey"]
    send(tally, key, "8.8.8.8", CHROME, {"name": "pageview", "path": "/", "visitorId": "a"})
    wait_until(lambda: dash_api(tally, user, project_id)["liveVisitors"] == 1, "the first visit")
    context = browser.new_context(viewport=DESKTOP)
    requests = Requests(context)
    page = watch(context.new_page())
    open_dashboard(page, tally, user, f"project={project_id}")
    assert page.get_attribute("#live", "data-value") == "1"
    send(tally, key, "8.8.8.8", FIREFOX, {"name": "pageview", "path": "/", "visitorId": "b"})
    page.wait_for_selector("#live[data-value='2']", timeout=60_000)
    assert page.text_content("#live .value") == "2"
    assert requests.count("/api/live?projectId=") >= 1
    assert requests.count("/api/dashboard?") == 1  # the page's own load, never again for live
    context.close()
    watch.assert_clean()


def test_today_is_drawn_as_its_hours(tally, shop, browser, watch):
    user, project_id = shop
    context = browser.new_context(viewport=DESKTOP)
    page = watch(context.new_page())
    open_dashboard(page, tally, user, f"project={project_id}&days=1")
    page.wait_for_selector("[data-chart=timeline][data-unit=hour] svg.main-svg")
    traces = page.eval_on_selector(
        "[data-chart=timeline]",
        "el => el.data.map(t => [t.name, t.visible, t.x, t.y])",
    )
    assert [(name, visible) for name, visible, _, _ in traces] == [
        ("Visitors", True),
        ("Pageviews", False),
        ("Events", False),
    ]
    hours = traces[0][2]
    assert 1 <= len(hours) <= 24
    assert [h[11:] for h in hours] == [f"{n:02d}:00:00" for n in range(len(hours))]
    # The hours with traffic carry exactly what the query API counts per local hour.
    answer = httpx.post(
        f"{tally}/api/v2/query",
        json={
            "site_id": project_id,
            "metrics": ["visitors", "pageviews", "events"],
            "date_range": "day",
            "dimensions": ["time:hour"],
        },
        headers=headers(user),
    ).json()["results"]
    for index, (_, _, x, y) in enumerate(traces):
        drawn = {hour: value for hour, value in zip(x, y, strict=True) if value}
        assert drawn == {r["dimensions"][0]: r["metrics"][index] for r in answer}
    assert sum(traces[0][3]) == 3  # v1, v2, v3 (the crawler left out)
    assert page.text_content("[data-panel=timeline] h2").startswith("Visitors per hour")
    # The toggle shows pageviews instead, on the same chart.
    page.click("[data-metric-toggle=pageviews]")
    page.wait_for_function(
        "() => document.querySelector('[data-chart=timeline]').data[1].visible === true"
    )
    assert page.text_content("[data-panel=timeline] h2").startswith("Pageviews per hour")
    # A one-day from/to range is drawn by hour too.
    day = hours[0][:10]
    open_dashboard(page, tally, user, f"project={project_id}&from={day}&to={day}")
    page.wait_for_selector("[data-chart=timeline][data-unit=hour] svg.main-svg")
    assert page.eval_on_selector("[data-chart=timeline]", "el => el.data[0].y") == traces[0][3]
    # A longer window is drawn by day, with each day's visitors.
    open_dashboard(page, tally, user, f"project={project_id}&days=7")
    page.wait_for_selector("[data-chart=timeline][data-unit=day] svg.main-svg")
    drawn = page.eval_on_selector("[data-chart=timeline]", "el => [el.data[0].x, el.data[0].y]")
    timeline = dash_api(tally, user, project_id)["timeline"]
    assert drawn == [[t["day"] for t in timeline], [t["visitors"] for t in timeline]]
    context.close()
    watch.assert_clean()


def test_a_phone_shows_recent_events_and_cards_whole(tally, shop, browser, watch):
    user, project_id = shop
    context = browser.new_context(viewport=PHONE_375, is_mobile=True, has_touch=True)
    page = watch(context.new_page())
    open_dashboard(page, tally, user, f"project={project_id}")
    page.wait_for_selector("[data-testid=recent-events] tbody tr")
    ready(page, "countries", "country")
    # Nothing wider than the screen: no cell of the recent events reaches past its right edge.
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE_375["width"]
    rights = page.eval_on_selector_all(
        "[data-testid=recent-events] td", "cells => cells.map(c => c.getBoundingClientRect().right)"
    )
    assert rights and max(rights) <= PHONE_375["width"]
    cells = page.eval_on_selector_all(
        "[data-testid=recent-events] tbody tr",
        "rows => rows.map(r => [...r.cells].map(c => c.textContent))",
    )
    assert len(cells) == 7 and all(len(row) == 4 for row in cells)
    # A long event name wraps beside its time, never over it (an "auto" column gave the name
    # the whole row and the time was drawn under it).
    overlaps = page.eval_on_selector(
        "[data-testid=recent-events] tbody tr",
        """row => {
            row.cells[1].textContent = 'checkout_completed_with_a_long_custom_event_name_v2_' +
                'from_the_app';
            const [time, name] = [row.cells[0], row.cells[1]].map(c => c.getBoundingClientRect());
            return time.right > name.left && time.left < name.right
                && time.bottom > name.top && time.top < name.bottom;
        }""",
    )
    assert overlaps is False
    # Every card's value on one line.
    lines = page.eval_on_selector_all(
        "#summary .value",
        "vs => vs.map(v => [v.getClientRects().length, v.scrollWidth <= v.clientWidth])",
    )
    assert lines and all(line == [1, True] for line in lines)
    screenshot(page, "panels-phone-375.png")
    for part in ("countries", "recent"):
        selector = (
            "[data-panel=countries]" if part == "countries" else ".panel:has(table.wide-table)"
        )
        page.locator(selector).screenshot(path=str(ARTIFACTS / f"panels-phone-375-{part}.png"))
    context.close()
    watch.assert_clean()


def test_settings_bot_rule_shows_on_the_dashboard(tally, browser, watch):
    user = f"owner-{uuid.uuid4().hex[:8]}"
    made = httpx.post(f"{tally}/api/projects", json={"name": "Bots"}, headers=headers(user))
    project_id, key = made.json()["projectId"], made.json()["apiKey"]
    send(tally, key, "8.8.8.8", CHROME, {"name": "pageview", "path": "/", "visitorId": "a"})
    send(tally, key, "8.8.8.8", GOOGLEBOT, {"name": "pageview", "path": "/", "visitorId": "b"})
    wait_until(lambda: dash_api(tally, user, project_id)["summary"]["botEvents"] == 1, "the bot")
    context = browser.new_context(viewport=DESKTOP)
    page = watch(context.new_page())
    open_dashboard(page, tally, user, f"project={project_id}")
    assert page.get_attribute("[data-metric=totalEvents]", "data-value") == "1"
    page.get_by_role("link", name="Settings").click()
    page.uncheck("#settings-bots")
    page.get_by_role("button", name="Save settings").click()
    page.get_by_role("link", name="Dashboard").click()
    page.wait_for_selector("[data-metric=totalEvents][data-value='2']")
    assert page.text_content("[data-testid=bot-events]").startswith("Bots are counted")
    ready(page, "browsers", "browser")
    assert shown(page, "browser") == breakdown_api(
        tally, user, project_id, by="browser", days=7, limit=10
    )
    context.close()
    watch.assert_clean()


def focused(page: Any) -> str:
    """The id of the focused element ('' for none, 'BODY' when focus fell to the page)."""
    return str(page.evaluate("document.activeElement.id || document.activeElement.tagName"))


def test_the_page_works_from_the_keyboard_and_reads_out_in_words(tally, shop, browser, watch):
    """What a keyboard or screen-reader user meets: no live region around the whole page (the
    live count would be read out every few seconds); after each change the focus is on the
    control that made it, or on what it made, never dropped on the page; a focused row shows a
    focus ring; panel tabs move with the arrow keys; each chart has its numbers as a table."""
    user, project_id = shop
    context = browser.new_context(viewport=DESKTOP)
    page = watch(context.new_page())
    open_dashboard(page, tally, user, f"project={project_id}&days=7")
    ready(page, "countries", "country")
    assert page.get_attribute("#main", "aria-live") is None
    assert page.title() == "Panels · Tally"

    # The charts' numbers, as tables: a day per row, the hours of the heatmap.
    api = dash_api(tally, user, project_id, days=7)
    days = page.eval_on_selector_all(
        "table[data-table-of=timeline] tbody tr", "rows => rows.map(r => r.cells[0].textContent)"
    )
    assert days == [t["day"] for t in api["timeline"]]
    assert page.get_attribute("[data-chart=timeline]", "aria-hidden") == "true"
    hours = page.eval_on_selector_all(
        "table[data-table-of=heatmap] tbody tr", "rows => rows.map(r => r.cells[1].textContent)"
    )
    assert hours == [f"{h['count']:,}" for h in api["hourlyHeatmap"]]

    # A select changes the view as its value changes; the focus stays on it.
    page.focus("#window")
    page.keyboard.press("ArrowDown")
    page.wait_for_url(lambda url: "days=14" in url)
    page.wait_for_selector("#summary")
    assert focused(page) == "window"

    # A row, reached by the keyboard, shows a ring; Enter filters, and the focus is on the
    # new filter's chip. Its × removes it, and the focus goes to "+ Add filter".
    ready(page, "countries", "country")
    row = "[data-testid=breakdown-country] tr[data-filter-value=DE]"
    page.focus(row)
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Tab")
    assert page.eval_on_selector(row, "r => r === document.activeElement")
    assert page.eval_on_selector(row, "r => getComputedStyle(r).outlineStyle") == "solid"
    page.keyboard.press("Enter")
    page.wait_for_url(lambda url: "filters=" in url)
    page.wait_for_selector("#chip-0")
    assert focused(page) == "chip-0"
    page.keyboard.press("Tab")  # the chip's ×
    assert page.evaluate("document.activeElement.className") == "chip-remove"
    page.keyboard.press("Enter")
    page.wait_for_url(lambda url: "filters=" not in url)
    page.wait_for_selector("#add-filter")
    assert focused(page) == "add-filter"

    # The filter editor takes the focus as it opens, in the same task (a focus a timeout later
    # let an Escape pressed at once reach the opener, and the editor stayed open), and gives it
    # back to what opened it when it closes.
    page.keyboard.press("Enter")
    page.wait_for_selector("#filter-editor")
    page.keyboard.press("Escape")
    assert focused(page) == "add-filter"
    assert page.query_selector("#filter-editor") is None
    opened = page.evaluate(
        "() => { document.getElementById('add-filter').click(); return document.activeElement.id; }"
    )
    assert opened == "filter-values"
    page.keyboard.press("Escape")
    assert focused(page) == "add-filter"
    assert page.query_selector("#filter-editor") is None

    # Panel tabs: one Tab stop, the arrows move along them and show the tab reached.
    ready(page, "sources", "source")
    page.focus("#tab-sources-source")
    page.keyboard.press("ArrowRight")
    assert focused(page) == "tab-sources-channel"
    ready(page, "sources", "channel")
    stops = page.eval_on_selector_all(
        "[data-panel=sources] [role=tab]", "tabs => tabs.map(t => [t.id, t.tabIndex])"
    )
    assert [t for t in stops if t[1] == 0] == [["tab-sources-channel", 0]]
    assert page.get_attribute("#panel-sources", "aria-labelledby") == "tab-sources-channel"
    page.keyboard.press("End")
    assert focused(page) == "tab-sources-referrer"

    # The project's tabs: focus stays on the tab chosen.
    page.focus("#tab-settings")
    page.keyboard.press("Enter")
    page.wait_for_selector("#project-settings")
    assert focused(page) == "tab-settings"
    context.close()
    watch.assert_clean()


def test_recent_visitors_are_cut_in_characters_and_a_revoke_waits(tally, browser, watch):
    """A visitor id is shown by its first 8 characters, never half an emoji; a key's revoke
    stays armed until the focus leaves it (no timer); a token given in the fragment of an open
    page signs in and leaves the address."""
    from conftest import token

    user = f"owner-{uuid.uuid4().hex[:8]}"
    made = httpx.post(f"{tally}/api/projects", json={"name": "Emoji"}, headers=headers(user))
    project_id, key = made.json()["projectId"], made.json()["apiKey"]
    visitor = "vis" + "\U0001f600" * 6 + "x"  # 10 characters, 16 UTF-16 units
    send(tally, key, "8.8.8.8", CHROME, {"name": "pageview", "path": "/", "visitorId": visitor})
    context = browser.new_context(viewport=DESKTOP)
    page = watch(context.new_page())
    page.goto(f"{tally}/")
    page.wait_for_selector("#token-input")
    page.evaluate(f"location.hash = 'token={token(user)}'")  # the page is open already
    page.wait_for_selector("#project-list .project-link")
    assert "token=" not in page.url
    page.goto(f"{tally}/?project={project_id}")
    page.wait_for_selector("[data-testid=recent-events] tbody tr")
    cell = page.eval_on_selector(
        "[data-testid=recent-events] tbody tr", "r => [...r.cells].map(c => c.textContent)"
    )
    assert visitor[:8] in cell and visitor[:9] not in cell  # 'vis' and five whole emoji

    page.goto(f"{tally}/?project={project_id}&tab=keys")
    revoke = page.locator("tr", has_text="Default").get_by_role("button", name="Revoke")
    revoke.click()
    armed = page.locator("tr", has_text="Default").get_by_role("button", name="Confirm revoke")
    page.wait_for_timeout(5_600)  # past the 5 s the confirmation used to last
    assert armed.is_visible()
    page.focus("#key-label")  # the focus leaves it: disarmed
    assert page.locator("tr", has_text="Default").get_by_role("button", name="Revoke").is_visible()
    context.close()
    watch.assert_clean()

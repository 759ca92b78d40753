"""The dashboard page's filters, date ranges and comparison, in a real browser (Debian's Chromium
driven by Playwright) against a real `tally serve`.

A shop in Europe/Berlin is visited by two people through the browser (their Chrome, see
AsVisitor): one comes from another site to /fp/ and reads /fp/pricing, one opens /fp/blog; the
first visitor's page also sends three pageviews of earlier days (9 and 3 days ago) through
/api/collect, as a tracker that had queued them would. Then the owner's page must show, for every
view it is put in by clicks (a row, a chip's ×, the compare toggle, a custom range) or by the URL,
exactly the numbers the API answers for that view.
"""

# ruff: noqa: F811
# (the fixtures tally, site and browser come from test_site_owner, as in test_panels)

from __future__ import annotations

import contextlib
import csv
import io
import json
import sys
import time
import uuid
from datetime import UTC, date, datetime, timedelta
from datetime import time as clock
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit
from zoneinfo import ZoneInfo

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_site_owner import (  # noqa: F401 - fixtures: tally, site, browser
    BROWSER_TESTS,
    DESKTOP,
    FAILED_LOAD,
    PHONE,
    Site,
    Watch,
    browser,
    headers,
    is_collect,
    screenshot,
    site,
    tally,
    wait_until,
)

from conftest import token

pytestmark = BROWSER_TESTS
playwright_api = pytest.importorskip("playwright.sync_api")

ZONE = "Europe/Berlin"
# The summary cards of the page (data-metric) and the API's summary fields they show.
CARDS = [
    "totalEvents",
    "pageviews",
    "uniqueVisitors",
    "uniqueSessions",
    "bounceRate",
    "avgSessionDurationMs",
]


class Shop:
    def __init__(self, tally: str, user: str, project_id: str, today: date) -> None:
        self.tally, self.user, self.project_id, self.today = tally, user, project_id, today

    def api(self, what: str = "dashboard", **params: Any) -> dict[str, Any]:
        """GET /api/<what> of the shop with ``params`` (filters as a list)."""
        query = {"projectId": self.project_id, **params}
        if "filters" in query:
            query["filters"] = json.dumps(query["filters"])
        if "from_" in query:
            query["from"] = query.pop("from_")
        response = httpx.get(
            f"{self.tally}/api/{what}", params=query, headers=headers(self.user), timeout=30
        )
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    def url(self, **params: str) -> str:
        return f"{self.tally}/?{urlencode({'project': self.project_id, **params})}"

    def day(self, offset: int) -> str:
        return (self.today + timedelta(days=offset)).isoformat()


def earlier_pageview(shop_today: date, days_ago: int, path: str) -> dict[str, Any]:
    """A pageview at noon UTC of a local day ``days_ago`` before today (the same day in Berlin)."""
    at = datetime.combine(shop_today - timedelta(days=days_ago), clock(12), tzinfo=UTC)
    return {
        "name": "pageview",
        "path": path,
        "occurredAt": at.isoformat().replace("+00:00", "Z"),
        "visitorId": uuid.uuid4().hex,
        "sessionId": uuid.uuid4().hex,
    }


SEND = """async ([url, events]) => {
  const res = await fetch(url, {method: 'POST', headers: {'content-type': 'text/plain'},
                                body: JSON.stringify({events})});
  return res.status;
}"""


@pytest.fixture(scope="module")
def shop(tally: str, site: Site, browser: Any) -> Shop:
    user = f"owner-{uuid.uuid4().hex[:8]}"
    made = httpx.post(
        f"{tally}/api/projects",
        json={"name": "Filter shop", "timezone": ZONE},
        headers=headers(user),
    )
    assert made.status_code == 201, made.text
    project_id, key = made.json()["projectId"], made.json()["apiKey"]
    today = datetime.now(ZoneInfo(ZONE)).date()
    shop = Shop(tally, user, project_id, today)

    home = site.add("/fp/", tally, key)
    blog = site.add("/fp/blog", tally, key)
    first = browser.new_context(viewport=DESKTOP)
    page = first.new_page()
    with page.expect_response(is_collect):
        page.goto(home, referer="http://news.example/")
    page.evaluate("history.pushState({}, '', '/fp/pricing'); document.title = 'Pricing'")
    earlier = [
        earlier_pageview(today, 9, "/fp/"),
        earlier_pageview(today, 9, "/fp/"),
        earlier_pageview(today, 3, "/fp/old"),
    ]
    status = page.evaluate(SEND, [f"{tally}/api/collect?apiKey={key}", earlier])
    assert status == 202
    second = browser.new_context(viewport=DESKTOP)
    reader = second.new_page()
    with reader.expect_response(is_collect):
        reader.goto(blog)
    wait_until(lambda: shop.api(days=14)["summary"]["pageviews"] == 6, "6 pageviews")
    # Both visits end (session_end by beacon) before the owner looks, so nothing changes later.
    page.close(run_before_unload=True)
    reader.close(run_before_unload=True)
    names = lambda: {r["name"]: r["count"] for r in shop.api(days=14)["eventBreakdown"]}  # noqa: E731
    wait_until(lambda: names().get("session_end") == 2, "2 session_end events")
    time.sleep(1.5)  # a late, duplicate session_end would have arrived by now
    assert names() == {"pageview": 6, "session_end": 2}
    first.close()
    second.close()
    return shop


def a_year_later(day: str) -> str:
    earlier = date.fromisoformat(day)
    try:
        return earlier.replace(year=earlier.year + 1).isoformat()
    except ValueError:  # February 29
        return date(earlier.year + 1, 3, 1).isoformat()


def owner_page(shop: Shop, browser: Any, watch: Watch, url: str, **options: Any) -> Any:
    context = browser.new_context(viewport=DESKTOP, **options)
    page = watch(context.new_page())
    page.goto(f"{url}#token={token(shop.user)}")
    return page


def loaded(page: Any) -> None:
    """Waits until the dashboard shows the view in the address bar."""
    page.wait_for_function(
        "() => { const s = document.querySelector('#summary');"
        " return s && s.dataset.search === location.pathname + location.search; }"
    )


def shown(page: Any) -> dict[str, float]:
    values: dict[str, str] = page.eval_on_selector_all(
        "#summary [data-metric]",
        "els => Object.fromEntries(els.map(e => [e.dataset.metric, e.dataset.value]))",
    )
    return {k: float(values[k]) for k in CARDS}


def expected(answer: dict[str, Any]) -> dict[str, float]:
    return {k: float(answer["summary"][k]) for k in CARDS}


def url_view(page: Any) -> dict[str, Any]:
    """The view in the page's address: its query parameters, filters parsed."""
    q = {k: v[0] for k, v in parse_qs(urlsplit(page.url).query).items()}
    if "filters" in q:
        q["filters"] = json.loads(q["filters"])
    return q


def chips(page: Any) -> list[str]:
    texts: list[str] = page.eval_on_selector_all(
        "#filters .chip .chip-edit", "els => els.map(e => e.textContent.trim())"
    )
    return texts


def point_at(page: Any, chart: str, target: Any) -> str:
    """Rests the mouse on ``target`` (a locator of one bar or shape of the plotly chart named
    ``chart``) and returns the chart's hover text: plotly picks what a click takes from the hover.
    The target's box is taken when it has stopped moving and checked again once the hover shows,
    as a panel that finishes loading meanwhile can move the chart and the mouse then lands on a
    neighbour (a clean-clone CI run read another bar's hover once); then it is pointed at again,
    at most 5 times."""
    hover = page.locator(f"[data-chart={chart}] .hoverlayer .hovertext")
    for _ in range(5):
        page.mouse.move(0, 0)  # off the chart: an earlier hover goes
        hover.wait_for(state="detached")
        box = target.bounding_box()
        page.wait_for_timeout(100)
        if target.bounding_box() != box:
            continue
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        page.mouse.move(x - 5, y)
        page.mouse.move(x, y, steps=5)
        hover.wait_for()
        text: str = hover.text_content()
        if target.bounding_box() == box:
            return text
    raise AssertionError(f"the {chart} chart kept moving")


def click_chart(page: Any, chart: str, target: Any, arrived: Any) -> str:
    """Clicks ``target`` of the plotly chart ``chart`` (pointed at first: :func:`point_at`) and
    waits until the page's address passes ``arrived``; returns the hover text clicked on. A
    click that plotly lost (a panel that finished loading redrew the chart between the press
    and the release; a clean-clone CI run saw one) is made again, at most 3 times."""

    def press() -> str:
        text = point_at(page, chart, target)
        page.mouse.down()
        page.mouse.up()
        return text

    for _ in range(2):
        text = press()
        with contextlib.suppress(playwright_api.TimeoutError):
            page.wait_for_url(arrived, timeout=10_000)
            return text
    text = press()
    page.wait_for_url(arrived, timeout=10_000)  # the third time, a timeout fails the test
    return text


# --- filters --------------------------------------------------------------------------------------


def test_clicking_a_row_filters_and_a_chip_removes_it(shop: Shop, browser: Any, watch: Watch):
    page = owner_page(shop, browser, watch, shop.url())
    loaded(page)
    unfiltered = shop.api(days=7)
    assert shown(page) == expected(unfiltered)
    assert unfiltered["summary"]["pageviews"] == 4  # today's three and the one of 3 days ago
    assert chips(page) == []

    # A row of the pages table: only that page's traffic, in the URL and on the cards.
    page.click('[data-testid=breakdown-path] tr[data-filter-value="/fp/blog"]')
    page.wait_for_url(lambda u: "filters=" in u)
    loaded(page)
    only_blog = [["is", "path", ["/fp/blog"]]]
    assert url_view(page) == {"project": shop.project_id, "filters": only_blog}
    filtered = shop.api(days=7, filters=only_blog)
    assert filtered["summary"]["pageviews"] == 1 and filtered["summary"]["uniqueVisitors"] == 1
    assert shown(page) == expected(filtered)
    assert chips(page) == ["Page is /fp/blog"]
    screenshot(page, "filters-desktop.png")

    # Back and forward step through the views.
    page.go_back()
    loaded(page)
    assert "filters" not in url_view(page) and shown(page) == expected(unfiltered)
    page.go_forward()
    loaded(page)
    assert url_view(page)["filters"] == only_blog and shown(page) == expected(filtered)

    # A chip's operator changes in its editor: every page but the blog.
    page.click("#filters .chip .chip-edit")
    page.select_option("#filter-op", "is_not")
    page.get_by_role("button", name="Change filter").click()
    page.wait_for_url(lambda u: "is_not" in u)
    loaded(page)
    not_blog = [["is_not", "path", ["/fp/blog"]]]
    assert url_view(page)["filters"] == not_blog
    assert shown(page) == expected(shop.api(days=7, filters=not_blog))
    assert chips(page) == ["Page is not /fp/blog"]

    # A second filter, added by its form: both apply (AND); "Clear all" removes both.
    page.click("#add-filter")
    page.select_option("#filter-dim", "referrer")
    page.select_option("#filter-op", "contains")
    page.fill("#filter-values", "news.example")
    page.get_by_role("button", name="Add filter", exact=True).click()
    page.wait_for_url(lambda u: "referrer" in u)
    loaded(page)
    both = [*not_blog, ["contains", "referrer", ["news.example"]]]
    assert url_view(page)["filters"] == both
    assert shown(page) == expected(shop.api(days=7, filters=both))
    assert chips(page) == ["Page is not /fp/blog", "Referrer contains news.example"]

    # The × of a chip removes that filter only.
    page.click("#filters .chip[data-filter-dim=referrer] .chip-remove")
    page.wait_for_url(lambda u: "referrer" not in u)
    loaded(page)
    assert url_view(page)["filters"] == not_blog
    assert shown(page) == expected(shop.api(days=7, filters=not_blog))

    # The last × goes back to every number unfiltered.
    page.get_by_role("button", name="Remove filter: Page is not /fp/blog").click()
    page.wait_for_url(lambda u: "filters" not in u)
    loaded(page)
    assert url_view(page) == {"project": shop.project_id}
    assert shown(page) == expected(unfiltered)
    assert chips(page) == []
    page.context.close()
    watch.assert_clean()


def test_a_row_of_a_panels_second_tab_filters_and_the_panel_stays_on_that_tab(
    shop: Shop, browser: Any, watch: Watch
):
    """The tab is in the address: clicking a row (a filter, so a new view) kept the filter but
    put the panel back on its first tab, hiding the row just clicked."""
    page = owner_page(shop, browser, watch, shop.url())
    loaded(page)
    page.click("[data-panel=entry-exit] [data-by=exitPage]")
    page.wait_for_url(lambda u: "panels=" in u)
    loaded(page)
    row = "[data-testid=breakdown-exitPage] tr[data-filter-value]"
    value = page.get_attribute(row, "data-filter-value")
    page.click(f'[data-testid=breakdown-exitPage] tr[data-filter-value="{value}"]')
    page.wait_for_url(lambda u: "filters=" in u)
    loaded(page)
    view = url_view(page)
    assert view["panels"] == "entry-exit:exitPage"
    assert view["filters"] == [["is", "exitPage", [value]]]
    page.wait_for_selector(f'[data-testid=breakdown-exitPage] tr[data-filter-value="{value}"]')
    tab = "[data-panel=entry-exit] [data-by=exitPage]"
    assert page.get_attribute(tab, "aria-selected") == "true"
    # Opened afresh, the shared address shows the same tab; its first tab drops the parameter.
    page.goto(page.url)
    loaded(page)
    assert page.get_attribute(tab, "aria-selected") == "true"
    page.click("[data-panel=entry-exit] [data-by=entryPage]")
    page.wait_for_url(lambda u: "panels=" not in u)
    assert url_view(page)["filters"] == [["is", "exitPage", [value]]]
    page.context.close()
    watch.assert_clean()


def pump(page: Any, check: Any, what: str, timeout: float = 60) -> None:
    """Waits until ``check()`` holds, letting Playwright deliver the page's events meanwhile (a
    plain sleep would hold them back)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        page.wait_for_timeout(50)


def holding(path: str, held: list[Any]) -> Any:
    """A route handler that holds the requests whose URL has ``path`` (in ``held``) and lets
    the others through."""

    def handle(route: Any) -> None:
        if path in route.request.url:
            held.append(route)
        else:
            route.continue_()

    return handle


def test_a_view_clicked_past_has_its_reads_aborted_and_never_shows(
    shop: Shop, browser: Any, watch: Watch
):
    """The page aborts the reads of a view it leaves (README "Views clicked past stop"): the
    owner clicks a row, and goes back before that view's answers arrive (they are held on the
    wire here): first its panels' breakdowns, then its dashboard itself. Every read of the view
    clicked past is aborted by the page, which is what tells Tally to stop its queries
    (tests/test_report_lane.py), and the page shows the view it is on, never the late one."""
    page = owner_page(shop, browser, watch, shop.url())
    loaded(page)
    unfiltered = shop.api(days=7)
    assert shown(page) == expected(unfiltered)
    blog_row = '[data-testid=breakdown-path] tr[data-filter-value="/fp/blog"]'
    failed: list[tuple[str, str]] = []
    page.on("requestfailed", lambda r: failed.append((r.url, r.failure or "")))

    # The dashboard answers first and the panels then ask their breakdowns: hold each in turn.
    for held_path, at_least in (("/api/breakdown?", 5), ("/api/dashboard?", 1)):
        held: list[Any] = []
        failed.clear()
        page.route(lambda u: "/api/" in u and "filters=" in u, holding(held_path, held))
        page.click(blog_row)
        page.wait_for_url(lambda u: "filters=" in u)
        pump(page, lambda held=held, n=at_least: len(held) >= n, f"the view's {held_path}")

        page.go_back()
        loaded(page)
        # Every read the view had sent by then is aborted. More of its reads than the ones
        # counted above may have reached the wire before the click back (a panel's read still
        # on its way): those are held, and aborted, too; so the reads held are read only now.
        pump(
            page,
            lambda held=held: {r.request.url for r in held} <= {u for u, _ in failed},
            "the reads to be aborted",
        )
        assert {r.request.url for r in held} == {u for u, _ in failed}, (held, failed)
        assert all("ERR_ABORTED" in why for _, why in failed), failed
        assert all("filters=" in u and held_path in u for u, _ in failed), failed
        # Released now, the old view's answers have nobody to go to.
        for route in held:
            with contextlib.suppress(Exception):
                route.continue_()
        page.unroute_all()
        page.wait_for_timeout(300)
        assert url_view(page) == {"project": shop.project_id}
        assert shown(page) == expected(unfiltered)
        assert chips(page) == []
    page.context.close()
    watch.assert_clean()


def test_a_bar_of_a_chart_and_a_row_of_a_panel_filter_too(shop: Shop, browser: Any, watch: Watch):
    page = owner_page(shop, browser, watch, shop.url())
    loaded(page)
    bars = "[data-chart=events] .trace.bars .point path"
    page.wait_for_selector(bars)
    page.locator("[data-chart=events]").scroll_into_view_if_needed()
    assert page.get_attribute("[data-chart=events]", "data-filter-dim") == "event"
    # Plotly picks the clicked bar from the hover before it: point at it, then click.
    click_chart(page, "events", page.locator(bars).first, lambda u: "filters=" in u)
    loaded(page)
    pageviews = [["is", "event", ["pageview"]]]
    assert url_view(page)["filters"] == pageviews
    assert shown(page) == expected(shop.api(days=7, filters=pageviews))
    assert chips(page) == ["Event is pageview"]

    # A row of the Browsers panel adds a second filter (AND).
    row = '[data-panel=browsers] tr[data-filter-value="Chrome"]'
    page.wait_for_selector(row)
    page.click(row)
    page.wait_for_url(lambda u: "Chrome" in u)
    loaded(page)
    both = [*pageviews, ["is", "browser", ["Chrome"]]]
    assert url_view(page)["filters"] == both
    answer = shop.api(days=7, filters=both)
    assert answer["summary"]["pageviews"] == answer["summary"]["totalEvents"] > 0
    assert shown(page) == expected(answer)
    page.click("#clear-filters")
    page.wait_for_url(lambda u: "filters" not in u)
    loaded(page)
    assert shown(page) == expected(shop.api(days=7))
    page.context.close()
    watch.assert_clean()


def test_a_filter_the_api_refuses_says_so_and_clears(shop: Shop, browser: Any, watch: Watch):
    bad = [["is", "planet", ["Mars"]]]
    refused = httpx.get(
        f"{shop.tally}/api/dashboard",
        params={"projectId": shop.project_id, "filters": json.dumps(bad)},
        headers=headers(shop.user),
    )
    assert refused.status_code == 400
    (detail,) = refused.json()["details"]
    assert detail["path"] == "$.filters[0][1]"

    page = owner_page(shop, browser, watch, shop.url(filters=json.dumps(bad)))
    alert = page.get_by_role("alert").filter(has_text="could not show this view")
    alert.wait_for()
    # The API's own words, naming the part, in plain text; the chip is there to remove too.
    assert f"Please check: filters[0][1] {detail['message']}." in alert.text_content()
    assert chips(page) == ["planet is Mars"]
    assert page.locator("#summary").count() == 0
    page.click("#error-clear-filters")
    page.wait_for_url(lambda u: "filters" not in u)
    loaded(page)
    assert shown(page) == expected(shop.api(days=7))

    # Filters that are not even JSON never reach the API: said, left out, and removable.
    page.goto(shop.url(filters='[["is","path"'))
    page.get_by_text("Some filters in this address could not be read").wait_for()
    page.wait_for_selector("#summary")
    assert shown(page) == expected(shop.api(days=7))
    page.click("#drop-unread-filters")
    page.wait_for_url(lambda u: "filters" not in u)
    loaded(page)
    assert page.get_by_text("could not be read").count() == 0

    # A date the API refuses in the URL (February 30): said, and the way back offered.
    page.goto(shop.url(**{"from": "2026-02-30", "to": "2026-03-02"}))
    alert = page.get_by_role("alert").filter(has_text="could not show this view")
    alert.wait_for()
    assert "from must be a date as YYYY-MM-DD" in alert.text_content()
    page.click("#error-clear-range")
    page.wait_for_url(lambda u: "from=" not in u)
    loaded(page)
    page.context.close()
    watch.assert_clean(FAILED_LOAD.format(400))


# --- comparison -----------------------------------------------------------------------------------


def test_compare_shows_each_cards_change_and_the_earlier_timeline(
    shop: Shop, browser: Any, watch: Watch
):
    page = owner_page(shop, browser, watch, shop.url())
    loaded(page)
    assert page.locator("#summary .change").count() == 0
    page.select_option("#compare", "previous_period")
    page.wait_for_url(lambda u: "compare=previous_period" in u)
    loaded(page)
    answer = shop.api(days=7, compare="previous_period")
    comparison = answer["comparison"]
    assert (comparison["from"], comparison["to"]) == (shop.day(-13), shop.day(-7))
    # The previous period had the two pageviews of 9 days ago; this one has four.
    assert comparison["change"]["pageviews"] == 100.0
    assert shown(page) == expected(answer)

    changes = page.eval_on_selector_all(
        "#summary [data-metric] .change",
        "els => els.map(e => [e.closest('[data-metric]').dataset.metric, e.dataset.change,"
        " e.querySelector('.delta').textContent + ' ' + e.querySelector('.vs').textContent,"
        " e.className, e.querySelector('.sr-only').textContent])",
    )
    assert [c[0] for c in changes] == CARDS
    for metric, value, text, kind, words in changes:
        change = comparison["change"][metric]
        if change is None:
            assert (value, text) == ("null", "– vs. previous period"), metric
            assert words.startswith("no change to show: "), metric
            continue
        assert float(value) == change, metric
        arrow = "↑" if change > 0 else "↓" if change < 0 else "→"
        assert text == f"{arrow} {abs(change):,g}% vs. previous period", metric
        # A screen reader reads words, not the arrow: "up 100% compared with <from> to <to> (…)".
        way = "up" if change > 0 else "down"
        moved = "no change" if change == 0 else f"{way} {abs(change):,g}%"
        assert words.startswith(f"{moved} compared with {comparison['from']} to "), metric
        # Colour backs the arrow: up is good, but for the bounce rate.
        better = change > 0 if metric != "bounceRate" else change < 0
        assert kind == f"change {'flat' if change == 0 else 'good' if better else 'bad'}", metric
    assert page.get_by_text(f"{shop.day(-13)} – {shop.day(-7)}").first.is_visible()

    # The main chart draws the earlier period's days over this one's, a line per metric; the
    # chart's metric toggle (visitors first) shows this range's and the earlier range's line.
    traces = page.evaluate(
        "() => document.querySelector('[data-chart=timeline]').data"
        ".map(t => [t.name, t.meta || '', t.y.length, t.customdata || null])"
    )
    earlier = [t for t in traces if t[1] == "comparison"]
    assert [t[0] for t in earlier] == [
        f"Visitors, {shop.day(-13)} – {shop.day(-7)}",
        f"Pageviews, {shop.day(-13)} – {shop.day(-7)}",
        f"Events, {shop.day(-13)} – {shop.day(-7)}",
    ]
    days = [t["day"] for t in comparison["timeline"]]
    for _, _, length, customdata in earlier:
        assert length == 7 and customdata == days
    drawn = page.evaluate(
        "() => document.querySelectorAll("
        "'[data-chart=timeline] svg.main-svg .scatterlayer .trace').length"
    )
    assert drawn == 2  # this period's visitors and the earlier period's
    page.click("[data-metric-toggle=pageviews]")
    visible = page.evaluate(
        "() => document.querySelector('[data-chart=timeline]').data"
        ".filter(t => t.visible !== false).map(t => t.name)"
    )
    assert visible == ["Pageviews", f"Pageviews, {shop.day(-13)} – {shop.day(-7)}"]
    page.click("[data-metric-toggle=visitors]")
    screenshot(page, "compare-desktop.png")

    # Previous year: nothing then, so every change is "–".
    page.select_option("#compare", "previous_year")
    page.wait_for_url(lambda u: "compare=previous_year" in u)
    loaded(page)
    yearly = shop.api(days=7, compare="previous_year")["comparison"]
    assert set(yearly["change"].values()) == {None}
    texts = page.eval_on_selector_all(
        "#summary .change",
        "els => els.map(e => e.querySelector('.delta').textContent + ' ' +"
        " e.querySelector('.vs').textContent)",
    )
    assert texts == ["– vs. previous year"] * len(CARDS)
    # A year earlier, drawn on the same dates a year later (February 29 on March 1).
    placed = page.evaluate(
        "() => document.querySelector('[data-chart=timeline]').data"
        ".filter(t => t.meta === 'comparison').map(t => [t.x, t.customdata])"
    )
    days = [t["day"] for t in yearly["timeline"]]
    assert placed == [[[a_year_later(day) for day in days], days]] * 3

    # Off again: no comparison in the URL, none on the cards.
    page.select_option("#compare", "")
    page.wait_for_url(lambda u: "compare" not in u)
    loaded(page)
    assert page.locator("#summary .change").count() == 0
    page.context.close()
    watch.assert_clean()


# --- ranges ---------------------------------------------------------------------------------------


def test_a_custom_range_drives_cards_files_and_the_raw_download(
    shop: Shop, browser: Any, watch: Watch
):
    page = owner_page(shop, browser, watch, shop.url(), accept_downloads=True)
    loaded(page)
    first, last = shop.day(-10), shop.day(-2)
    assert page.input_value("#range-to") == shop.day(0)  # today in Berlin, not the browser's
    assert page.input_value("#range-from") == shop.day(-6)

    # Refused in plain words before anything is asked: the days the wrong way round, too long.
    page.fill("#range-from", last)
    page.fill("#range-to", first)
    page.click("#range-apply")
    page.get_by_text("The first day is after the last day: swap them.").wait_for()
    page.fill("#range-from", shop.day(-400))
    page.fill("#range-to", shop.day(0))
    page.click("#range-apply")
    page.get_by_text("A range can cover at most 366 days; this one has 401.").wait_for()
    assert url_view(page) == {"project": shop.project_id}

    page.fill("#range-from", first)
    page.fill("#range-to", last)
    page.click("#range-apply")
    page.wait_for_url(lambda u: "from=" in u)
    loaded(page)
    assert url_view(page) == {"project": shop.project_id, "from": first, "to": last}
    answer = shop.api(from_=first, to=last)
    assert answer["summary"]["pageviews"] == 3  # 9 and 3 days ago, not today's
    assert shown(page) == expected(answer)
    assert page.input_value("#window") == "custom"
    assert page.eval_on_selector("#window", "s => s.selectedOptions[0].textContent") == (
        f"{first} – {last}"
    )
    rows = page.eval_on_selector_all(
        "[data-testid=breakdown-path] tbody tr", "rows => rows.map(r => r.dataset.filterValue)"
    )
    assert sorted(rows) == sorted(r["path"] for r in answer["topPaths"]) == ["/fp/", "/fp/old"]
    names = page.eval_on_selector_all("[data-csv]", "els => els.map(e => e.dataset.csv)")
    assert f"tally-{shop.project_id}-path-{first}_{last}.csv" in names

    # The raw events of the range: the UTC days that cover its Berlin days. The browser
    # downloads the file itself (streamed to disk), after a HEAD that checks the answer: the
    # page never holds the file (a fetch did, gigabytes for 90 days of a large site).
    asked: list[tuple[str, str, str]] = []
    page.on("request", lambda q: asked.append((q.method, q.resource_type, q.url)))
    with page.expect_download(timeout=30_000) as info:
        page.click("#export-events")
    start = datetime.combine(date.fromisoformat(first), clock(0), tzinfo=ZoneInfo(ZONE))
    assert info.value.suggested_filename == (
        f"tally-{shop.project_id}-{start.astimezone(UTC).date()}-{last}.csv"
    )
    events = list(csv.DictReader(io.StringIO(Path(info.value.path()).read_text())))
    assert sorted(e["path"] for e in events) == ["/fp/", "/fp/", "/fp/old"]
    # The page's only request is the HEAD; the file came as the browser's own download above.
    exports = [(m, kind) for m, kind, u in asked if "/api/export?" in u]
    assert exports == [("HEAD", "fetch")], asked

    # A filter on top of the range, and a comparison: all three in the URL, numbers the API's.
    page.click('[data-testid=breakdown-path] tr[data-filter-value="/fp/"]')
    page.wait_for_url(lambda u: "filters=" in u)
    loaded(page)
    asked.clear()
    page.select_option("#compare", "previous_period")
    page.wait_for_url(lambda u: "compare=" in u)
    loaded(page)
    page.wait_for_selector("[data-testid=breakdown-path] tbody tr")
    view = url_view(page)
    assert (view["from"], view["to"], view["compare"]) == (first, last, "previous_period")
    # The dashboard asks for the comparison; the panels, which show none, do not.
    dashboards = [u for _, _, u in asked if "/api/dashboard?" in u]
    panels = [u for _, _, u in asked if "/api/breakdown?" in u]
    assert dashboards and all("compare=previous_period" in u for u in dashboards)
    assert panels and not any("compare=" in u for u in panels), panels
    assert view["filters"] == [["is", "path", ["/fp/"]]]
    answer = shop.api(from_=first, to=last, filters=view["filters"], compare="previous_period")
    assert answer["summary"]["pageviews"] == 2
    assert shown(page) == expected(answer)
    change = page.eval_on_selector("[data-metric=pageviews] .change", "e => e.dataset.change")
    assert change == "null" and answer["comparison"]["change"]["pageviews"] is None

    # Back to a preset: the range leaves the URL, the filter and the comparison stay.
    page.select_option("#window", "30")
    page.wait_for_url(lambda u: "days=30" in u)
    loaded(page)
    view = url_view(page)
    assert "from" not in view and view["compare"] == "previous_period" and "filters" in view
    assert shown(page) == expected(
        shop.api(days=30, filters=view["filters"], compare="previous_period")
    )
    # A long range with its comparison: the date axis spans the range, no further (markers on
    # the comparison's 90 points made Plotly pad it by weeks on either side).
    page.select_option("#window", "90")
    page.wait_for_url(lambda u: "days=90" in u)
    loaded(page)
    page.wait_for_function(
        "() => (document.querySelector('[data-chart=timeline]').data || [])"
        ".some(t => t.meta === 'comparison')"
    )
    axis, first_day, last_day = page.eval_on_selector(
        "[data-chart=timeline]",
        "el => [el.layout.xaxis.range, el.data[0].x[0], el.data[0].x.at(-1)]",
    )
    assert [axis[0][:10], axis[1][:10]] == [first_day, last_day]
    page.context.close()
    watch.assert_clean()


STICKING_OUT = """width => [...document.querySelectorAll('body *')]
  .filter(e => !e.closest('.table-wrap') && e.getBoundingClientRect().right > width + 1)
  .map(e => `${e.tagName}.${e.className}: ${e.textContent.slice(0, 40)}`)"""


def test_the_view_bar_fits_a_phone(shop: Shop, browser: Any, watch: Watch):
    filters = json.dumps([["contains", "path", ["/fp/"]], ["is_not", "country", ["DE"]]])
    url = shop.url(filters=filters, compare="previous_period")
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    page = watch(context.new_page())
    page.goto(f"{url}#token={token(shop.user)}")
    page.wait_for_selector("#summary")
    assert chips(page) == ["Page contains /fp/", "Country is not Germany (DE)"]
    screenshot(page, "filters-phone.png")
    # Nothing sticks out of the screen (tables scroll inside their own box).
    assert page.evaluate(STICKING_OUT, PHONE["width"]) == []
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    context.close()
    watch.assert_clean()


@pytest.fixture
def watch() -> Watch:
    return Watch()

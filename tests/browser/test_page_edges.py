"""The dashboard page at its edges, in a real browser (headless Chromium against a real `tally
serve`): a server that takes the connection and never answers, right-to-left values, the
narrowest phones, a project name of one 60-letter word, and a project whose events are all in the
far past.

- An API call that gets no answer ends, after the page's timeout (30 s; shortened here through
  ``window.tallyApiTimeoutMs``), in the words "did not answer in time" and a *Try again*; while it
  waits, Refresh leaves the older numbers dimmed with "Updating…" and ``aria-busy``.
- A value that starts right-to-left (a Hebrew OS name, path or filter, an Arabic event name) and is
  cut with an ellipsis shows its own start, in every panel and chip.
- At 320 px, a panel's three columns fit it, the hours of a day are labelled without overlapping,
  and no project page scrolls sideways for a long name.
- Recent events of another year say the year; a project with events only long ago is not told to
  install the snippet (one whose keys were never used is); no visit ended is "–", not "0 ms".
"""

# ruff: noqa: F811
# (the fixtures tally, browser and watch come from test_site_owner, as in test_panels)

from __future__ import annotations

import contextlib
import itertools
import json
import re
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit
from zoneinfo import ZoneInfo

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_filters_page import pump
from test_site_owner import (  # noqa: F401 - fixtures: tally, browser, watch
    BROWSER_TESTS,
    DESKTOP,
    Watch,
    browser,
    headers,
    new_project,
    tally,
    wait_until,
    watch,
)

from conftest import token

pytestmark = BROWSER_TESTS

PHONE_320 = {"width": 320, "height": 640}
PHONE_375 = {"width": 375, "height": 740}
CHROME = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Safari/537.36"
)
# Values whose first strong character is right-to-left, long enough to be cut on any screen.
HEBREW = "שלום עולם זה עמוד בעברית ארוך מאוד לבדיקה "
OS_NAME = (HEBREW * 3)[:90].strip()
PATH = "/" + (HEBREW * 6)[:200].strip()
EVENT = ("הרשמה_" + "חשבון_חדש_" * 12)[:95]
DAY = timedelta(days=1)


def send(tally: str, key: str, *events: dict[str, Any]) -> None:
    response = httpx.post(
        f"{tally}/api/collect",
        json={"events": list(events)},
        headers={"x-api-key": key, "user-agent": CHROME, "x-forwarded-for": "81.2.69.142"},
        timeout=30,
    )
    assert response.status_code == 202, response.text


def summary(tally: str, user: str, project_id: str, **params: Any) -> dict[str, Any]:
    response = httpx.get(
        f"{tally}/api/dashboard",
        params={"projectId": project_id, **(params or {"days": 7})},
        headers=headers(user),
        timeout=30,
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["summary"]
    return result


class Edge:
    """A UTC project: today right-to-left values (no session_end), yesterday one pageview."""

    def __init__(self, tally: str) -> None:
        self.tally = tally
        self.user = f"owner-{uuid.uuid4().hex[:8]}"
        self.project_id, key = new_project(tally, self.user, "Edges")
        visit = {"visitorId": "v1", "sessionId": "s1"}
        other = {"visitorId": "v2", "sessionId": "s2"}
        rtl = {"metadata": {"os": OS_NAME}}
        send(
            tally,
            key,
            {"name": "pageview", "path": PATH, **visit, **rtl},
            {"name": EVENT, "path": PATH, **visit, **rtl},
            {"name": "pageview", "path": "/", **other},
            {"name": "pageview", "path": "/", **other},
        )
        self.yesterday = (datetime.now(UTC) - DAY).date().isoformat()
        at = f"{self.yesterday}T12:00:00Z"
        send(tally, key, {"name": "pageview", "path": "/y", "occurredAt": at, **other})
        wait_until(
            lambda: summary(tally, self.user, self.project_id)["totalEvents"] == 5, "the events"
        )

    def open(self, browser: Any, watch: Watch, viewport: dict[str, int], query: str = "") -> Any:
        page = watch(browser.new_context(viewport=viewport).new_page())
        page.goto(f"{self.tally}/?project={self.project_id}{query}#token={token(self.user)}")
        page.wait_for_selector("#summary")
        return page


@pytest.fixture(scope="module")
def edge(tally: str) -> Edge:
    return Edge(tally)


def hold_api(page: Any) -> list[Any]:
    """Every API request of the page from now on is held: taken, and never answered (as by a
    server whose worker is frozen). The requests held so far are in the list returned."""
    held: list[Any] = []
    page.route(lambda url: "/api/" in url, lambda route: held.append(route))
    return held


def release(page: Any, held: list[Any]) -> None:
    page.unroute_all()
    for route in held:
        with contextlib.suppress(Exception):  # the page may have aborted it already
            route.continue_()


# --- a server that never answers ---------------------------------------------------------------


def test_a_server_that_never_answers_is_said_in_words_with_try_again(
    edge: Edge, browser: Any, watch: Watch
):
    page = edge.open(browser, watch, DESKTOP)
    events = page.get_attribute("[data-metric=totalEvents]", "data-value")
    assert page.get_attribute("#dashboard", "aria-busy") is None
    assert page.text_content("#dashboard-pending") == ""

    # Refresh while the server holds the answer: the older numbers stay, dimmed, the body is
    # busy and "Updating…" says so, the focus stays on Refresh; the answer ends it all. (The
    # timeout is set far off here: only the held answer decides.)
    page.evaluate("window.tallyApiTimeoutMs = 600000")
    held = hold_api(page)
    page.focus("#refresh")
    page.keyboard.press("Enter")
    pump(page, lambda: any("/api/dashboard?" in r.request.url for r in held), "the refresh")
    assert page.get_attribute("#dashboard", "aria-busy") == "true"
    assert page.text_content("#dashboard-pending") == "Updating…"
    assert page.get_attribute("#dashboard-pending", "role") == "status"
    assert page.get_attribute("#dashboard", "class") == "pending"  # dimmed by app.css
    assert page.get_attribute("[data-metric=totalEvents]", "data-value") == events
    assert page.evaluate("document.activeElement.id") == "refresh"
    assert page.get_attribute("#main", "aria-live") is None
    release(page, held)
    page.wait_for_function("() => !document.querySelector('#dashboard[aria-busy]')")
    assert page.text_content("#dashboard-pending") == ""
    assert page.get_attribute("[data-metric=totalEvents]", "data-value") == events

    # The same with the page's timeout (shortened): an answer that never comes ends in words
    # and "Try again", which works once the server answers again.
    page.evaluate("window.tallyApiTimeoutMs = 1500")
    held = hold_api(page)
    page.click("#refresh")
    notice = page.locator("#dashboard .notice.error")
    notice.wait_for()
    assert "Tally did not answer in time (2 seconds)" in notice.text_content()
    assert page.get_attribute("#dashboard", "aria-busy") is None
    assert page.text_content("#dashboard-pending") == ""
    release(page, held)
    notice.get_by_role("button", name="Try again").click()
    page.wait_for_selector("#summary")
    assert page.get_attribute("[data-metric=totalEvents]", "data-value") == events
    assert page.evaluate("document.activeElement.id") == "refresh"  # not dropped on the page

    # Another window, while the server holds every answer: "Loading…", busy; the answer ends
    # it. Then again with the short timeout: the words, and "Try again".
    page.evaluate("window.tallyApiTimeoutMs = 600000")
    held = hold_api(page)
    page.select_option("#window", "30")
    page.wait_for_url(lambda url: "days=30" in url)
    pump(page, lambda: held, "the projects' read")
    assert page.locator("main [aria-busy=true]").text_content() == "Loading…"
    release(page, held)
    page.wait_for_selector("#summary")
    # busy no more once every answer is in (the breakdown panels' too: busy while they load)
    page.wait_for_function("() => !document.querySelector('main [aria-busy=true]')")
    page.evaluate("window.tallyApiTimeoutMs = 1500")
    held = hold_api(page)
    page.select_option("#window", "14")
    notice = page.locator("main .notice.error")
    notice.wait_for()
    assert "did not answer in time" in notice.text_content()
    assert page.locator("main [aria-busy=true]").count() == 0
    release(page, held)
    notice.get_by_role("button", name="Try again").click()
    page.wait_for_selector("#summary")
    assert page.input_value("#window") == "14"
    page.context.close()
    watch.assert_clean()


# --- right-to-left values ------------------------------------------------------------------------

# Elements cut with an ellipsis whose text starts right-to-left: for each, whether its first
# character is drawn inside it (its start in view) and its computed direction.
RTL_STARTS = r"""els => els.filter(el => el.scrollWidth > el.clientWidth + 1
    && /^[^A-Za-z\u0590-\u06FF]*[\u0590-\u06FF]/.test(el.textContent)).map(el => {
  el.scrollIntoView({block: 'center'});
  const text = el.firstChild && el.firstChild.nodeType === 3 ? el.firstChild : el;
  const range = document.createRange();
  range.setStart(text, 0);
  range.setEnd(text, 1);
  const first = range.getBoundingClientRect();
  const box = el.getBoundingClientRect();
  const where = el.closest('[data-panel]') ? el.closest('[data-panel]').dataset.panel
    : el.closest('[data-testid]') ? el.closest('[data-testid]').dataset.testid : el.className;
  return [where, first.left >= box.left - 1 && first.right <= box.right + 1,
    getComputedStyle(el).direction];
})"""
CUT = "td.trunc, .chip-values"


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE_320], ids=["desktop", "phone-320"])
def test_a_right_to_left_value_cut_short_shows_its_start(
    edge: Edge, browser: Any, watch: Watch, viewport: dict[str, int]
):
    page = edge.open(browser, watch, viewport)
    for panel, by in [("pages", "path"), ("entry-exit", "entryPage"), ("os", "os")]:
        page.wait_for_selector(f"[data-panel={panel}][data-by={by}][data-state=ready]")
    cut = page.eval_on_selector_all(CUT, RTL_STARTS)
    page.click("[data-panel=entry-exit] [data-by=exitPage]")
    page.wait_for_selector("[data-panel=entry-exit][data-by=exitPage][data-state=ready]")
    cut += page.eval_on_selector_all("[data-panel=entry-exit] td.trunc", RTL_STARTS)
    where = [w for w, _, _ in cut]
    for panel in ("pages", "os", "recent-events"):
        assert panel in where, cut
    assert where.count("entry-exit") == 2, cut  # entry and exit pages
    assert all(start and direction == "rtl" for _, start, direction in cut), cut
    # Every value cell reads in the direction of its own text, cut or not.
    names = page.eval_on_selector_all(
        "[data-testid=event-breakdown] td:first-child, [data-testid=recent-events] td",
        "cells => cells.filter(c => c.textContent.startsWith('הרשמה'))"
        ".map(c => getComputedStyle(c).direction)",
    )
    assert names and set(names) == {"rtl"}
    # The events chart labels the bar with the name's start (cut at its end).
    page.wait_for_selector("[data-chart=events] .ytick text")
    ticks = page.eval_on_selector_all(
        "[data-chart=events] .ytick text", "ts => ts.map(t => t.textContent)"
    )
    assert any(t.startswith(EVENT[:8]) for t in ticks), ticks

    # A chip of the OS, filtered by a click on its row: its value shows its start too.
    page.click(f"[data-testid=breakdown-os] tr[data-filter-value='{OS_NAME}']")
    page.wait_for_selector("#chip-0")
    page.wait_for_selector("[data-panel=os][data-state=ready]")
    chip = page.eval_on_selector_all(".chip-values", RTL_STARTS)
    assert chip and all(start and d == "rtl" for _, start, d in chip), chip
    assert page.text_content("#chip-0").strip() == f"Operating system is {OS_NAME}"
    assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
    page.context.close()
    watch.assert_clean()


# --- narrow phones -------------------------------------------------------------------------------


def test_a_320_px_phone_fits_the_panels_and_the_hours_of_a_day(
    edge: Edge, browser: Any, watch: Watch
):
    page = edge.open(browser, watch, PHONE_320)
    for panel in ("countries", "os", "browsers", "pages"):
        page.wait_for_selector(f"[data-panel={panel}][data-state=ready]")
    overflowing = page.eval_on_selector_all(
        "[data-panel] .table-wrap",
        "ws => ws.filter(w => w.scrollWidth > w.clientWidth)"
        ".map(w => [w.closest('[data-panel]').dataset.panel, w.scrollWidth, w.clientWidth])",
    )
    assert overflowing == []
    # The Pageviews column is inside its panel, in every breakdown.
    clipped = page.eval_on_selector_all(
        "[data-panel] .table-wrap tr > :nth-child(3)",
        "cells => cells.filter(c => c.getBoundingClientRect().right >"
        " c.closest('.table-wrap').getBoundingClientRect().right + 0.5).length",
    )
    assert clipped == 0
    page.context.close()

    # A whole day (yesterday, all 24 hours) as its hours: labels apart at 320 and 375 px.
    for viewport in (PHONE_320, PHONE_375):
        page = edge.open(browser, watch, viewport, f"&from={edge.yesterday}&to={edge.yesterday}")
        page.wait_for_selector("[data-chart=timeline][data-unit=hour] .xtick text")
        labels = page.eval_on_selector_all(
            "[data-chart=timeline] .xtick text",
            "ts => ts.map(t => { const r = t.getBoundingClientRect();"
            " return [t.textContent, r.left, r.right]; })",
        )
        assert len(labels) >= 3, labels
        assert all(re.fullmatch(r"\d\d:00", text) for text, _, _ in labels), labels
        gaps = [b[1] - a[2] for a, b in itertools.pairwise(labels)]
        assert min(gaps) >= 4, (viewport, labels)
        page.context.close()
    watch.assert_clean()


def test_a_long_one_word_project_name_does_not_scroll_sideways(tally, browser, watch):
    user = f"owner-{uuid.uuid4().hex[:8]}"
    name = "W" * 60
    project_id, _ = new_project(tally, user, name)
    page = watch(browser.new_context(viewport=PHONE_320).new_page())
    for tab in ("", "&tab=keys", "&tab=settings"):
        page.goto(f"{tally}/?project={project_id}{tab}#token={token(user)}")
        page.wait_for_selector("#summary, #keys table, #project-settings")
        assert page.text_content("#project-title") == name
        wide = page.evaluate(
            """() => [...document.querySelectorAll('main *')].filter(e => {
                 const r = e.getBoundingClientRect();
                 return r.width > 0 && r.right > innerWidth + 0.5 && !e.closest('.sr-only')
                   && !e.closest('.table-wrap');  // a table scrolls in its own box
               }).map(e => e.tagName + '.' + e.className)"""
        )
        assert wide == [], tab
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE_320["width"], tab
    page.context.close()
    watch.assert_clean()


# --- times, empty windows, session length ---------------------------------------------------------


def test_the_far_past_says_its_year_and_is_not_told_to_install_the_snippet(tally, browser, watch):
    user = f"owner-{uuid.uuid4().hex[:8]}"
    project_id, key = new_project(tally, user, "Long ago")
    now = datetime.now(UTC)
    old = [now - timedelta(days=400 + i) for i in range(3)]
    send(
        tally,
        key,
        *[
            {"name": "pageview", "path": f"/old{i}", "occurredAt": t.isoformat(), "visitorId": "p"}
            for i, t in enumerate(old)
        ],
    )
    first, last = old[-1].date().isoformat(), old[0].date().isoformat()
    range_ = {"from": first, "to": last}
    wait_until(lambda: summary(tally, user, project_id, **range_)["totalEvents"] == 3, "events")
    keys = f"{tally}/api/projects/keys?projectId={project_id}"
    wait_until(
        lambda: httpx.get(keys, headers=headers(user), timeout=30).json()["keys"][0]["lastUsedAt"],
        "the key's last use",
    )
    page = watch(browser.new_context(viewport=DESKTOP).new_page())

    # The last 7 days hold nothing: said so, without "once a site with the snippet is visited"
    # (the key has been used: the project has had events).
    page.goto(f"{tally}/?project={project_id}#token={token(user)}")
    notice = page.locator("#dashboard .notice")
    notice.wait_for()
    text = notice.text_content()
    assert text.startswith("No events in the last 7 days. Other days may have some"), text
    assert "snippet" not in text and "yet" not in text
    assert page.locator("#dashboard .notice a").count() == 0
    assert page.text_content("[data-metric=avgSessionDurationMs] .value") == "–"

    # Their range: the times of the recent events say their year (not this one).
    page.goto(f"{tally}/?project={project_id}&from={first}&to={last}")
    page.wait_for_selector("[data-testid=recent-events] tbody tr")
    times = page.eval_on_selector_all(
        "[data-testid=recent-events] tbody tr", "rows => rows.map(r => r.cells[0].textContent)"
    )
    assert times == [f"{t:%b} {t.day}, {t.year}, {t:%H:%M:%S}" for t in old]

    # A project whose keys were never used is told about the snippet.
    fresh, _ = new_project(tally, user, "Brand new")
    page.goto(f"{tally}/?project={fresh}")
    notice.wait_for()
    assert notice.text_content().startswith(
        "No events in the last 7 days: none of this project’s API keys has been used yet."
    )
    assert notice.get_by_role("link", name="Get the snippet").count() == 1
    page.context.close()
    watch.assert_clean()


def test_this_years_times_leave_the_year_out_and_no_visit_ended_is_a_dash(
    edge: Edge, browser: Any, watch: Watch
):
    page = edge.open(browser, watch, DESKTOP)
    page.wait_for_selector("[data-testid=recent-events] tbody tr")
    newest = page.text_content("[data-testid=recent-events] tbody tr td")  # sent just now
    assert re.fullmatch(r"[A-Z][a-z]{2} \d{1,2}, \d\d:\d\d:\d\d", newest), newest
    # No session_end in the window: avgSessionDurationMs is 0, "no visit ended", shown as "–".
    assert summary(edge.tally, edge.user, edge.project_id)["avgSessionDurationMs"] == 0
    card = page.locator("[data-metric=avgSessionDurationMs]")
    assert card.locator(".value").text_content() == "–"
    assert card.get_attribute("data-value") == "0"
    assert page.locator("[data-testid=session-ends]").count() == 0
    page.context.close()
    watch.assert_clean()


# --- what a dashboard-page hunt found ------------------------------------------------------------


def test_any_days_the_api_takes_names_and_labels_in_characters_busy_panels_named_keys(
    edge, browser, watch
):
    """A shared `days=3` view showed the last 7 days; name and label fields counted UTF-16 units
    (30 emoji filled a 60-character name, cut without a word); breakdown panels loading were
    not marked busy; the one place a key is shown had fields without an accessible name."""
    page = edge.open(browser, watch, DESKTOP, "&days=3")
    assert page.input_value("#window") == "3"
    assert page.locator("#window option:checked").text_content() == "Last 3 days"
    total = summary(edge.tally, edge.user, edge.project_id, days=3)["totalEvents"]
    page.wait_for_selector("[data-metric=totalEvents]")
    assert page.get_attribute("[data-metric=totalEvents]", "data-value") == str(total)
    assert "days=3" in page.url

    # Panels are busy while their answers are awaited, and not once they are in.
    page.wait_for_selector("[data-panel][data-state=ready]")
    held: list[Any] = []
    page.route(lambda url: "/api/breakdown" in url, lambda route: held.append(route))
    page.click("#refresh")
    pump(page, lambda: page.locator("[data-panel][aria-busy=true]").count() > 0, "busy panels")
    release(page, held)
    pump(page, lambda: page.locator("[data-panel][aria-busy]").count() == 0, "panels done")

    # 40 emoji are 40 characters: taken whole; 61 characters are refused in words.
    page.goto(f"{edge.tally}/?project={edge.project_id}&tab=settings")
    page.wait_for_selector("#settings-name")
    page.fill("#settings-name", "😀" * 40)
    assert page.input_value("#settings-name") == "😀" * 40
    assert page.evaluate("document.querySelector('#settings-name').validity.valid")
    page.fill("#settings-name", "é" * 61)
    message = page.evaluate("document.querySelector('#settings-name').validationMessage")
    assert message == "At most 60 characters (now 61).", message

    # A new key's fields say what they hold.
    page.goto(f"{edge.tally}/?project={edge.project_id}&tab=keys")
    page.fill("#key-label", "🔑" * 40)
    page.get_by_role("button", name="Add key").click()
    page.wait_for_selector("[data-testid=new-key]")
    assert page.get_by_label("API key", exact=True).input_value().startswith("tk_")
    assert "tally.js" in page.get_by_label("Snippet", exact=False).input_value()
    keys = httpx.get(
        f"{edge.tally}/api/projects/keys",
        params={"projectId": edge.project_id},
        headers=headers(edge.user),
    ).json()["keys"]
    assert "🔑" * 40 in [k["label"] for k in keys]
    page.context.close()
    watch.assert_clean()


def test_a_choice_made_with_arrow_keys_loads_once_and_refresh_follows_the_day(edge, browser, watch):
    """Arrowing through the Window or Compare select (a closed select fires change at every
    step) loaded a view at each step; a Refresh past the zone's midnight kept the range fields on
    the day the view was drawn."""
    page = edge.open(browser, watch, DESKTOP)
    asked: list[str] = []
    page.on("request", lambda req: "/api/dashboard" in req.url and asked.append(req.url))
    page.focus("#window")
    for _ in range(3):  # 7 -> 14 -> 30 -> 90 days, a step every 100 ms
        page.keyboard.press("ArrowDown")
        page.wait_for_timeout(100)
    pump(page, lambda: "days=90" in page.url and len(asked) >= 1, "the chosen window")
    page.wait_for_selector("#summary")
    page.wait_for_timeout(1500)  # no other step's view follows
    assert [("days=90" in url) for url in asked] == [True], asked
    assert page.evaluate("document.activeElement.id") == "window"

    asked.clear()
    page.focus("#compare")
    page.keyboard.press("ArrowDown")  # Previous period
    page.wait_for_timeout(100)
    page.keyboard.press("ArrowDown")  # Previous year
    page.keyboard.press("Enter")  # at once, without waiting for the keys to rest
    assert "compare=previous_year" in page.url
    page.wait_for_selector("#summary")
    page.wait_for_timeout(1500)
    assert [("compare=previous_year" in url) for url in asked] == [True], asked

    # A pointer's choice acts at once (select_option is a choice without keys).
    page.select_option("#window", "14")
    assert "days=14" in page.url
    page.wait_for_selector("#summary")
    page.context.close()

    # The page's clock on one day, then the next (the UTC project's range fields follow it).
    context = browser.new_context(viewport=DESKTOP)
    page = watch(context.new_page())
    first = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0) - 3 * DAY
    page.clock.set_fixed_time(first)
    page.goto(f"{edge.tally}/?project={edge.project_id}#token={token(edge.user)}")
    page.wait_for_selector("#summary")
    assert page.input_value("#range-to") == first.date().isoformat()
    assert page.get_attribute("#range-to", "max") == first.date().isoformat()
    page.clock.set_fixed_time(first + DAY)
    page.click("#refresh")
    day = (first + DAY).date()
    pump(page, lambda: page.input_value("#range-to") == day.isoformat(), "a day on")
    assert page.input_value("#range-from") == (day - 6 * DAY).isoformat()
    page.wait_for_selector("#summary")
    assert page.evaluate("document.activeElement.id") == "refresh"
    context.close()
    watch.assert_clean()


def test_every_download_button_says_what_it_downloads(edge, browser, watch):
    """Four panels' buttons (the days, events by name, by hour, recent events) were all named
    "Download CSV": a screen reader's list of buttons could not tell them apart."""
    page = edge.open(browser, watch, DESKTOP)
    page.wait_for_selector("[data-panel][data-state=ready]")
    # each button's accessible name: aria-label, else its aria-labelledby's texts, else its text
    names = page.eval_on_selector_all(
        "button[data-csv]",
        """bs => bs.map((b) => b.getAttribute('aria-label') || (b.getAttribute('aria-labelledby')
            ? b.getAttribute('aria-labelledby').split(' ')
                .map((id) => document.getElementById(id).textContent).join(' ')
            : b.textContent))""",
    )
    assert len(names) >= 8, names
    assert all(name.startswith("Download CSV") and name != "Download CSV" for name in names)
    assert len(set(names)) == len(names), names
    assert "Download CSV Visitors per day" in names
    page.context.close()
    watch.assert_clean()


def test_refresh_after_a_change_made_elsewhere_draws_the_new_zone(tally, browser, watch):
    """The page kept the zone it was drawn in when the project's zone was changed elsewhere
    (another tab, a co-owner, the API): Refresh asked the numbers again, which the API answered
    in the new zone, under the old zone's note, range fields and hours."""
    user = f"owner-{uuid.uuid4().hex[:8]}"
    project_id, key = new_project(tally, user, "Zones")

    def settle(**change: Any) -> None:
        body = {"projectId": project_id, **change}
        answer = httpx.patch(f"{tally}/api/projects", json=body, headers=headers(user))
        assert answer.status_code == 200, answer.text

    settle(timezone="America/New_York")
    send(tally, key, {"name": "pageview", "path": "/", "visitorId": "v1"})
    context = browser.new_context(viewport=DESKTOP)
    page = watch(context.new_page())
    page.goto(f"{tally}/?project={project_id}#token={token(user)}")
    page.wait_for_selector("#summary")
    note = "[data-testid=zone-note]"
    assert page.text_content(note) == "Days and hours in America/New_York."

    settle(timezone="Pacific/Chatham", name="Zones renamed")
    page.click("#refresh")
    pump(page, lambda: page.text_content(note) == "Days and hours in Pacific/Chatham.", "the zone")
    page.wait_for_selector("#summary")
    today = datetime.now(ZoneInfo("Pacific/Chatham")).date().isoformat()
    assert page.input_value("#range-to") == today
    assert "Zones renamed" in page.text_content("h1")
    assert page.evaluate("document.activeElement.id") == "refresh"

    # Nothing changed: Refresh keeps the view and asks the numbers again.
    asked: list[str] = []
    page.on("request", lambda q: asked.append(q.url))
    page.click("#refresh")
    pump(page, lambda: any("/api/dashboard?" in u for u in asked), "the numbers asked again")
    assert page.text_content(note) == "Days and hours in Pacific/Chatham."
    context.close()
    watch.assert_clean()


# --- what a second dashboard-page hunt found -----------------------------------------------------

HUGE = {
    "totalEvents": 12_345_678,
    "pageviews": 123_456_789,
    "uniqueVisitors": 123_456_789_012,
    "uniqueSessions": 12_345_678_901_234,
}


@pytest.mark.parametrize("viewport", [DESKTOP, {"width": 1024, "height": 768}, PHONE_375])
def test_a_count_of_many_digits_is_read_whole(edge, browser, watch, viewport):
    """A 10M-event dashboard's 12,345,678 was cut to "12,345,67…" in its 150 px card, and a
    phone scrolled sideways for a count of 9 digits. The API's answer is the server's own with
    its counts made large (the layout does not depend on the data)."""
    context = browser.new_context(viewport=viewport)
    page = watch(context.new_page())

    def large(route: Any) -> None:
        answer = route.fetch()
        body = answer.json()
        body["summary"].update(HUGE)
        route.fulfill(response=answer, json=body)

    page.route(lambda url: "/api/dashboard" in url, large)
    page.goto(f"{edge.tally}/?project={edge.project_id}#token={token(edge.user)}")
    page.wait_for_selector("#summary")
    cut = page.eval_on_selector_all(
        "#summary .metric .value",
        """els => els.filter(e => e.scrollWidth > e.clientWidth + 1
                         || e.getBoundingClientRect().right > e.closest('.metric')
                              .getBoundingClientRect().right + 1)
                   .map(e => e.textContent)""",
    )
    assert cut == [], cut
    shown = page.eval_on_selector_all(
        "#summary .metric .value", "els => els.map(e => e.textContent)"
    )
    assert {"12,345,678", "123,456,789", "123,456,789,012", "12,345,678,901,234"} <= set(shown)
    wide = page.evaluate("document.documentElement.scrollWidth")
    assert wide <= viewport["width"], wide
    context.close()
    watch.assert_clean()


def test_arrowing_back_to_the_custom_range_keeps_it(edge, browser, watch):
    """The Window select shows a custom range as its own option; arrowing off it and back within
    the keys' rest dropped the range for the default 7 days (the option's value is no number)."""
    today = datetime.now(UTC).date()
    first = (today - 3 * DAY).isoformat()
    page = edge.open(browser, watch, DESKTOP, f"&from={first}&to={today.isoformat()}")
    assert page.input_value("#window") == "custom"
    page.focus("#window")
    page.keyboard.press("ArrowUp")
    page.wait_for_timeout(100)
    page.keyboard.press("ArrowDown")
    page.wait_for_timeout(1500)  # past the keys' rest: nothing is loaded
    view = parse_qs(urlsplit(page.url).query)
    assert (view.get("from"), view.get("to")) == ([first], [today.isoformat()]), page.url
    assert page.input_value("#window") == "custom"
    assert page.input_value("#range-from") == first
    page.context.close()
    watch.assert_clean()


@pytest.mark.parametrize("value", ["/y ", "line1\nline2"], ids=["trailing space", "line break"])
def test_changing_a_filters_operator_keeps_its_value_exactly(edge, browser, watch, value):
    """A chip's editor read its values back from the box, trimmed and one per line: a value with
    a trailing space lost it, one with a line break became two, when only the operator changed."""
    filters = json.dumps([["is", "path", [value]]])
    page = edge.open(browser, watch, DESKTOP, f"&filters={quote(filters)}")
    page.click("#filters .chip .chip-edit")
    page.select_option("#filter-op", "is_not")
    page.get_by_role("button", name="Change filter").click()
    page.wait_for_url(lambda u: "is_not" in u)
    page.wait_for_selector("#summary")
    view = parse_qs(urlsplit(page.url).query)
    assert json.loads(view["filters"][0]) == [["is_not", "path", [value]]]
    # Typed values are still one per line, trimmed.
    page.click("#filters .chip .chip-edit")
    page.fill("#filter-values", " /a \n\n/b")
    page.get_by_role("button", name="Change filter").click()
    page.wait_for_url(lambda u: "%2Fa" in u or "/a" in unquote(u))
    view = parse_qs(urlsplit(page.url).query)
    assert json.loads(view["filters"][0]) == [["is_not", "path", ["/a", "/b"]]]
    page.context.close()
    watch.assert_clean()


def test_no_visit_ended_has_no_change_to_show(tally, browser, watch):
    """Yesterday a visit ended (60 s), today none: the card said "–" beside "↓ 100% vs. previous
    period" (the API's change is from its 0, which stands for "none")."""
    user = f"owner-{uuid.uuid4().hex[:8]}"
    project_id, key = new_project(tally, user, "Ended yesterday")
    yesterday = f"{(datetime.now(UTC) - DAY).date().isoformat()}T12:00:00Z"
    visit = {"visitorId": "v1", "sessionId": "s1", "occurredAt": yesterday}
    send(
        tally,
        key,
        {"name": "pageview", "path": "/", **visit},
        {"name": "session_end", "metadata": {"durationMs": 60000}, **visit},
        {"name": "pageview", "path": "/", "visitorId": "v2", "sessionId": "s2"},
    )
    wait_until(lambda: summary(tally, user, project_id, days=2)["totalEvents"] == 3, "the events")
    page = watch(browser.new_context(viewport=DESKTOP).new_page())
    page.goto(f"{tally}/?project={project_id}&days=1&compare=previous_period#token={token(user)}")
    page.wait_for_selector("#summary .change")
    card = page.locator("[data-metric=avgSessionDurationMs]")
    assert card.locator(".value").text_content() == "–"
    change = card.locator(".change")
    assert change.get_attribute("data-change") == "null"
    assert change.locator(".delta").text_content() == "–"
    assert "no visit ended in this view" in change.locator(".sr-only").text_content()
    # The other cards still show theirs: one pageview against one.
    assert page.get_attribute("[data-metric=pageviews] .change", "data-change") == "0"
    page.context.close()
    watch.assert_clean()


def test_the_range_form_speaks_of_the_range_entered(edge, browser, watch):
    """With the browser's own checks a refused submit kept the last message beside a range it no
    longer described; it is Tally's words for what is in the fields now."""
    page = edge.open(browser, watch, DESKTOP)
    today = datetime.now(UTC).date()
    page.fill("#range-from", today.isoformat())
    page.fill("#range-to", (today - 2 * DAY).isoformat())
    page.click("#range-apply")
    assert page.text_content("#range-status") == "The first day is after the last day: swap them."
    page.fill("#range-to", "")
    assert page.text_content("#range-status") == ""  # what it said no longer holds
    page.click("#range-apply")
    assert page.text_content("#range-status") == "Choose both the first and the last day."
    assert "from=" not in page.url
    page.context.close()
    watch.assert_clean()


def test_the_days_axis_holds_the_window_and_says_the_year_across_two(edge, browser, watch):
    """A 366-day range read "Nov 28" at both ends of its axis; a 30-day window's axis, padded by
    Plotly for its markers and the comparison's, showed a tick of the day before it."""
    today = datetime.now(UTC).date()
    first = (today - 365 * DAY).isoformat()
    page = edge.open(browser, watch, DESKTOP, f"&from={first}&to={today.isoformat()}")
    page.wait_for_selector("[data-chart=timeline] .main-svg")
    axis = page.eval_on_selector("[data-chart=timeline]", "el => el.layout.xaxis")
    assert axis["tickformat"] == "%b %d, %Y"
    assert [axis["range"][0][:10], axis["range"][1][:10]] == [first, today.isoformat()]
    page.context.close()

    page = edge.open(browser, watch, DESKTOP, "&days=30&compare=previous_period")
    page.wait_for_function(
        "() => (document.querySelector('[data-chart=timeline]').data || [])"
        ".some(t => t.meta === 'comparison')"
    )
    axis = page.eval_on_selector("[data-chart=timeline]", "el => el.layout.xaxis")
    start = (today - 29 * DAY).isoformat()
    assert axis["tickformat"] in ("%b %d", "%b %d, %Y")
    assert axis["range"][0] > (today - 30 * DAY).isoformat(), axis["range"]
    assert axis["range"][0] < start and axis["range"][1][:10] == today.isoformat()
    page.context.close()
    watch.assert_clean()


def test_no_visit_with_a_pageview_has_no_bounce_rate(tally, browser, watch):
    """Yesterday one visit of one pageview (bounce rate 100%), today only a custom event: the
    card said "Bounce rate 0%" (the API's 0 means there was no visit to bounce) beside
    "↓ 100%"; it is "–", with no change either."""
    user = f"owner-{uuid.uuid4().hex[:8]}"
    project_id, key = new_project(tally, user, "No pageview today")
    yesterday = f"{(datetime.now(UTC) - DAY).date().isoformat()}T12:00:00Z"
    send(
        tally,
        key,
        {
            "name": "pageview",
            "path": "/",
            "visitorId": "v1",
            "sessionId": "s1",
            "occurredAt": yesterday,
        },
        {"name": "signup", "visitorId": "v2", "sessionId": "s2"},
    )
    wait_until(lambda: summary(tally, user, project_id, days=2)["totalEvents"] == 2, "the events")
    assert summary(tally, user, project_id, days=1)["bounceRate"] == 0
    page = watch(browser.new_context(viewport=DESKTOP).new_page())
    page.goto(f"{tally}/?project={project_id}&days=1&compare=previous_period#token={token(user)}")
    page.wait_for_selector("#summary .change")
    card = page.locator("[data-metric=bounceRate]")
    assert card.locator(".value").text_content() == "–"
    assert card.get_attribute("data-value") == "0"
    assert card.locator(".change").get_attribute("data-change") == "null"
    assert "no visit with a pageview" in card.locator(".change .sr-only").text_content()
    page.context.close()
    watch.assert_clean()

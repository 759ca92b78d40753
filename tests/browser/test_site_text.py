"""What a tracked site (or a token) says, shown as the text it is, in a real browser (headless
Chromium against a real `tally serve`).

Event names, referrers and campaigns are the site's words, not the page's: the "Events by name"
chart shows `<a href=...>` or `<b>` as text, not as plotly's markup (a link, bold, a style the
CSP refuses); names that look like numbers or dates stay bars of their own; a long name is cut
with an ellipsis and is whole in the hover. The tracker cuts long text by characters without
splitting an emoji, so nothing it sends is refused. A row whose value is longer than a filter
value may be (2048 characters) still filters the dashboard, by `contains` its start. A
non-ASCII token subject reads right, and DB-IP's attribution is said once, in the page's column.
"""

# ruff: noqa: F811
# (the fixtures tally, site, browser and watch come from test_site_owner, as in test_panels)

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_filters_page import chips, click_chart, point_at, pump, url_view
from test_site_owner import (  # noqa: F401 - fixtures: tally, site, browser, watch
    ARTIFACTS,
    BROWSER_TESTS,
    DESKTOP,
    Site,
    Watch,
    Wire,
    browser,
    headers,
    is_collect,
    new_project,
    site,
    tally,
    watch,
)

from conftest import JWT_SECRET, token

pytestmark = BROWSER_TESTS
playwright_api = pytest.importorskip("playwright.sync_api")

PHONE_375 = {"width": 375, "height": 740}
CHROME = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Safari/537.36"
)
LONG_NAME = ("checkout_step_" + "with_a_really_long_description_" * 3)[:100]  # the longest
# Event names that plotly would read as markup, entities, numbers or dates.
NAMES = [
    '<a href="https://evil.example/login">Session expired</a>',
    "<b>x</b>",
    "line<br>break",
    '<span style="color:red">red</span>',
    "AT&amp;T &lt;i&gt; & co",
    "404",
    "2024",
    "2026-01-01",
    LONG_NAME,
]


def send(tally: str, key: str, *events: dict[str, Any]) -> None:
    response = httpx.post(
        f"{tally}/api/collect",
        json={"events": list(events)},
        headers={"x-api-key": key, "user-agent": CHROME},
        timeout=10,
    )
    assert response.status_code == 202, response.text


def api(tally: str, user: str, what: str, **params: Any) -> dict[str, Any]:
    response = httpx.get(
        f"{tally}/api/{what}", params={"days": 7, **params}, headers=headers(user), timeout=10
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def event_counts(tally: str, user: str, project_id: str) -> dict[str, int]:
    d = api(tally, user, "dashboard", projectId=project_id)
    return {r["name"]: r["count"] for r in d["eventBreakdown"]}


def owner(browser: Any, watch: Watch, viewport: dict[str, int]) -> Any:
    return watch(browser.new_context(viewport=viewport).new_page())


def dashboard_page(page: Any, tally: str, user: str, project_id: str) -> None:
    page.goto(f"{tally}/?project={project_id}#token={token(user)}")
    page.wait_for_selector("#summary")


# The events chart as drawn: tick labels (bottom to top), hover-less facts of its layout.
EVENTS_CHART = """el => ({
  ticks: [...el.querySelectorAll('.ytick text')].map(t => t.textContent),
  links: el.querySelectorAll('svg a').length,
  styled: el.querySelectorAll('svg .ytick tspan[style], svg .ytick text[style*="color"]').length,
  yType: el._fullLayout.yaxis.type,
  width: el.clientWidth,
  plotWidth: el._fullLayout._size.w,
  bars: el.querySelectorAll('.trace.bars .point path').length,
})"""


def hover_text(page: Any, index: int) -> str:
    """The hover of the events chart's bar ``index`` (in the order of its data)."""
    bar = page.locator("[data-chart=events] .trace.bars .point path").nth(index)
    return point_at(page, "events", bar)


@pytest.fixture(scope="module")
def names_project(tally: str) -> tuple[str, str]:
    """(user, project id) of a project whose events have the NAMES above (and pageviews)."""
    user = f"owner-{uuid.uuid4().hex[:8]}"
    project_id, key = new_project(tally, user, "Event names")
    visit = {"visitorId": "v1", "sessionId": "s1", "path": "/"}
    events = [{"name": "pageview", **visit} for _ in range(3)]
    events += [{"name": name, **visit} for name in NAMES]
    send(tally, key, *events)
    deadline = time.monotonic() + 60
    while event_counts(tally, user, project_id).get("pageview") != 3:
        assert time.monotonic() < deadline, "the events were not stored"
        time.sleep(0.2)  # no page open yet: nothing for Playwright to deliver meanwhile
    return user, project_id


def test_event_names_are_text_in_the_chart_and_bars_of_their_own(
    tally, names_project, browser, watch
):
    user, project_id = names_project
    for viewport, name in [(DESKTOP, "desktop"), (PHONE_375, "phone")]:
        page = owner(browser, watch, viewport)
        dashboard_page(page, tally, user, project_id)
        page.wait_for_selector("[data-chart=events] .trace.bars .point path")
        page.locator("[data-chart=events]").scroll_into_view_if_needed()
        chart = page.eval_on_selector("[data-chart=events]", EVENTS_CHART)
        # Every name is a bar and a label of its own, literally: no link, no bold, no style, and
        # "404", "2024" and "2026-01-01" are categories like "pageview" (not a number axis).
        assert chart["yType"] == "category"
        assert chart["bars"] == len(NAMES) + 1
        assert chart["links"] == 0 and chart["styled"] == 0
        # Each label is its name, or the name's start cut with an ellipsis (the long one is).
        labels = {name: label(name, chart["ticks"]) for name in [*NAMES, "pageview"]}
        assert len(set(labels.values())) == len(chart["ticks"]) == len(NAMES) + 1, chart
        for short in ["pageview", "<b>x</b>", "line<br>break", "404", "2024", "2026-01-01"]:
            assert labels[short] == short
        assert labels[LONG_NAME].endswith("…") and 8 <= len(labels[LONG_NAME]) <= 32
        # The bars keep most of the chart's width.
        assert chart["plotWidth"] >= 0.45 * chart["width"] and chart["plotWidth"] >= 120, chart
        # The hover has the whole name, as text.
        data = page.eval_on_selector("[data-chart=events]", "el => el.data[0].customdata")
        for shown_name in [LONG_NAME, NAMES[0], "line<br>break", NAMES[4]]:
            index = data.index(escaped(shown_name))
            assert hover_text(page, index) == f"{shown_name}: 1"
        page.mouse.move(0, 0)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        panel = page.locator("section.panel", has=page.locator("[data-chart=events]"))
        panel.screenshot(path=str(ARTIFACTS / f"event-names-{name}.png"))
        if viewport is DESKTOP:
            # A bar filters by its own name, not by the chart's escaped label.
            index = data.index(escaped("<b>x</b>"))
            bar = page.locator("[data-chart=events] .trace.bars .point path").nth(index)
            click_chart(page, "events", bar, lambda u: "filters=" in u)
            page.wait_for_selector("#summary")
            assert url_view(page)["filters"] == [["is", "event", ["<b>x</b>"]]]
            assert chips(page) == ["Event is <b>x</b>"]
        page.context.close()
    watch.assert_clean()


# Names that, left to plotly, make a number axis (the bars unlabelled, "pageview" gone) or a
# date axis.
NUMBERS_AND_DATES = [
    [("404", 5), ("500", 3), ("2024", 2), ("pageview", 4)],
    [("2026-01-01", 3), ("2026-06-15", 2), ("1999-12-31", 1)],
]


def test_names_like_numbers_or_dates_are_bars_of_their_own(tally, browser, watch):
    user = f"owner-{uuid.uuid4().hex[:8]}"
    page = owner(browser, watch, DESKTOP)
    for names in NUMBERS_AND_DATES:
        project_id, key = new_project(tally, user, "Numbers " + names[0][0])
        events = [
            {"name": n, "visitorId": f"v{n}{i}", "sessionId": f"s{n}{i}"}
            for n, c in names
            for i in range(c)
        ]
        send(tally, key, *events)
        pump(
            page,
            lambda: event_counts(tally, user, project_id) == dict(names),  # noqa: B023
            "the events to be stored",
        )
        dashboard_page(page, tally, user, project_id)
        page.wait_for_selector("[data-chart=events] .trace.bars .point path")
        chart = page.eval_on_selector("[data-chart=events]", EVENTS_CHART)
        assert chart["yType"] == "category"
        assert sorted(chart["ticks"]) == sorted(n for n, _ in names)
        assert chart["bars"] == len(names)
    page.context.close()
    watch.assert_clean()


def label(name: str, ticks: list[str]) -> str:
    """The one tick label that shows ``name``: the name, or its start and an ellipsis."""
    found = [t for t in ticks if t == name or (t.endswith("…") and name.startswith(t[:-1]))]
    assert len(found) == 1, (name, ticks)
    return found[0]


def escaped(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# --- the tracker ----------------------------------------------------------------------------------

TITLE = "x" * 1023 + "\U0001f600"  # 1024 characters, the most a metadata string may have
EMOJI_NAME = "a" + "\U0001f600" * 60  # 61 characters: 121 UTF-16 code units
LONG_NOTE = "b" + "\U0001f600" * 1100  # cut to 1024 characters


def test_the_tracker_cuts_text_by_characters_and_never_splits_an_emoji(
    tally: str, site: Site, browser: Any, watch: Watch
):
    user = f"owner-{uuid.uuid4().hex[:8]}"
    project_id, key = new_project(tally, user, "Emoji shop")
    title = f"<script>document.title = {TITLE!r};</script>".replace("'", '"')
    home = site.add("/emoji/", tally, key, head=title)
    context = browser.new_context(viewport=DESKTOP)
    wire = Wire(context)
    page = watch(context.new_page())
    statuses: list[int] = []
    page.on("response", lambda r: statuses.append(r.status) if is_collect(r) else None)
    page.goto(home)
    page.evaluate(
        "([name, note]) => { tally.track(name, {note, '\\ud83d': 'lone', ['k'.repeat(101)]: 1}); }",
        [EMOJI_NAME, LONG_NOTE],
    )
    pump(page, lambda: {e["name"] for e in wire.events()} >= {"pageview", EMOJI_NAME}, "events")
    pump(page, lambda: len(statuses) == len(wire.requests), "the answers")
    assert set(statuses) == {202}
    pageview = next(e for e in wire.events() if e["name"] == "pageview")
    assert pageview["metadata"]["pageTitle"] == TITLE
    custom = next(e for e in wire.events() if e["name"] == EMOJI_NAME)
    note = custom["metadata"]["note"]
    assert len(note) == 1024 and note == LONG_NOTE[:1024]  # Python counts code points
    # A lone surrogate in a key becomes U+FFFD; a key over 100 characters is left out.
    assert set(custom["metadata"]) == {"note", "\ufffd"}

    def stored() -> bool:
        return event_counts(tally, user, project_id) == {"pageview": 1, EMOJI_NAME: 1}

    pump(page, stored, "the events to be stored")
    context.close()
    watch.assert_clean()


# --- values longer than a filter value ------------------------------------------------------------

# 2127 characters: its first 2048 end inside the emoji, where a cut by UTF-16 units would leave
# half of one (26 + 2001 + 21 emoji = 2048 characters, 2069 code units).
LONG_REFERRER = "https://forum.example/t?q=" + "x" * 2001 + "\U0001f600" * 100
LONG_CAMPAIGN = "c" * 2500


def test_a_row_longer_than_a_filter_value_filters_by_its_start(tally, browser, watch):
    user = f"owner-{uuid.uuid4().hex[:8]}"
    project_id, key = new_project(tally, user, "Long referrer")
    send(
        tally,
        key,
        {
            "name": "pageview",
            "path": "/",
            "url": "https://shop.example/?utm_source=forum&utm_campaign=" + LONG_CAMPAIGN,
            "referrer": LONG_REFERRER,
            "visitorId": "v1",
            "sessionId": "s1",
        },
        {"name": "pageview", "path": "/other", "visitorId": "v2", "sessionId": "s2"},
    )
    page = owner(browser, watch, DESKTOP)
    pump(
        page,
        lambda: api(tally, user, "dashboard", projectId=project_id)["summary"]["pageviews"] == 2,
        "the pageviews to be stored",
    )
    for by, value in [("referrer", LONG_REFERRER), ("utmCampaign", LONG_CAMPAIGN)]:
        dashboard_page(page, tally, user, project_id)
        page.click(f"[data-panel=sources] [data-by={by}]")
        page.wait_for_selector(f"[data-panel=sources][data-state=ready][data-by={by}]")
        row = page.locator(f"[data-testid=breakdown-{by}] tbody tr").first
        assert row.get_attribute("data-filter-value") == value
        row.click()
        page.wait_for_url(lambda u: "filters=" in u)
        page.wait_for_selector("#summary")
        start = value[:2048]  # characters: the emoji whole
        assert url_view(page)["filters"] == [["contains", by, [start]]]
        assert page.get_attribute("#filters .chip", "data-filter-op") == "contains"
        assert page.locator("#dashboard .notice.error").count() == 0
        expected = api(
            tally,
            user,
            "dashboard",
            projectId=project_id,
            filters=json.dumps([["contains", by, [start]]]),
        )
        assert expected["summary"]["pageviews"] == 1
        values = page.eval_on_selector_all(
            "#summary [data-metric=pageviews]", "els => els.map(e => e.dataset.value)"
        )
        assert values == ["1"]
    page.context.close()
    watch.assert_clean()


# --- the signed-in subject and the attribution ----------------------------------------------------


def utf8_token(sub: str) -> str:
    """A session token as `tally token --sub` writes one: its claims JSON in UTF-8 (not with
    \\u escapes, as PyJWT's), HS256 with the tests' secret."""

    def part(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    now = int(time.time())
    claims = {"sub": sub, "iat": now, "exp": now + 3600}
    head = part(b'{"alg":"HS256","typ":"JWT"}')
    body = part(json.dumps(claims, ensure_ascii=False).encode())
    mac = hmac.new(JWT_SECRET.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{part(mac)}"


def test_a_non_ascii_subject_reads_right_and_the_attribution_is_in_the_column(
    tally, browser, watch
):
    user = "jörg@exämple.de"
    page = owner(browser, watch, DESKTOP)
    page.goto(f"{tally}/#token={utf8_token(user)}")
    page.wait_for_selector("#project-list")
    assert page.text_content("#who") == f"Signed in as {user}"
    # DB-IP's attribution, once, within the content column (not at the window's edge).
    page.goto(f"{tally}/?project=nothing")
    page.wait_for_selector("#main .notice, #main h1")
    assert page.locator("a[href='https://db-ip.com']").count() == 1
    main = page.eval_on_selector(
        "#main",
        "el => { const s = getComputedStyle(el); const b = el.getBoundingClientRect();"
        " return b.left + parseFloat(s.paddingLeft); }",
    )
    footer = page.locator("footer small").bounding_box()
    assert abs(footer["x"] - main) < 60 and footer["x"] > 20
    page.context.close()
    watch.assert_clean()

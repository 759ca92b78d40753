"""What integrators meet, in a real browser (Debian's Chromium driven by Playwright) against a
real `tally serve`: /api/schema opens Swagger UI from Tally's own files, lists every operation
of the OpenAPI document, logs no console error (the page's CSP refuses anything inline or from
elsewhere, and Chromium reports each refusal as one) and sends no request off the host; the
dashboard page's "Download CSV" of a panel saves what it shows, and "Download raw events" the
window's events as GET /api/export writes them."""

# ruff: noqa: F811
# (the fixtures tally, site and browser come from test_site_owner, as in test_panels)

from __future__ import annotations

import csv
import io
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_site_owner import (  # noqa: F401 - fixture: tally
    BROWSER_TESTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    DESKTOP,
    Watch,
    new_project,
    screenshot,
    tally,
    wait_until,
)

from conftest import token

pytestmark = BROWSER_TESTS
playwright_api = pytest.importorskip("playwright.sync_api")

METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.mark.parametrize("path", ["/api/schema", "/api/schema/swagger"])
def test_the_docs_list_every_operation_offline(tally: str, browser: Any, path: str) -> None:
    document = httpx.get(f"{tally}/api/schema/openapi.json").json()
    expected = sorted(
        (method.upper(), route)
        for route, item in document["paths"].items()
        for method in item
        if method in METHODS
    )
    assert ("GET", "/api/export") in expected and len(expected) >= 8

    context = browser.new_context(viewport=DESKTOP)
    requests: list[str] = []
    watch = Watch()
    page = watch(context.new_page())
    page.on("request", lambda request: requests.append(request.url))
    page.goto(f"{tally}{path}")
    page.wait_for_selector(".opblock", timeout=30_000)
    page.wait_for_function(
        f"document.querySelectorAll('.opblock').length >= {len(expected)}", timeout=30_000
    )
    shown = page.eval_on_selector_all(
        ".opblock",
        """els => els.map(e => [
            e.querySelector('.opblock-summary-method').textContent.trim(),
            e.querySelector('.opblock-summary-path').getAttribute('data-path'),
        ])""",
    )
    assert sorted(tuple(s) for s in shown) == expected
    assert page.title() == "Tally API"
    # One operation opened: its parameters are there (the page works past the list).
    export = '.opblock-get:has(.opblock-summary-path[data-path="/api/export"])'
    page.click(f"{export} .opblock-summary")
    page.wait_for_selector(f"{export} .parameters", timeout=10_000)
    names = page.eval_on_selector_all(
        f"{export} .parameter__name",
        "els => els.map(e => e.firstChild.textContent.trim())",
    )
    assert sorted(names) == ["format", "from", "projectId", "to"]
    screenshot(page, f"api-docs{path.replace('/', '-')}.png")
    context.close()

    off_host = [u for u in requests if not (u.startswith(tally + "/") or u.startswith("data:"))]
    assert off_host == []
    assert any("/assets/swagger-ui-bundle.js" in u for u in requests)
    assert any(u.endswith("/api/schema/openapi.json") for u in requests)
    watch.assert_clean()


# The WCAG contrast ratio of an element's text with what is behind it: its own background and its
# ancestors' as computed styles give them (rgb() or rgba()), translucent layers composed over the
# first opaque one (or white), as axe-core does.
CONTRAST = """el => {
  const rgba = (c) => {
    const v = c.match(/[\\d.]+/g).map(Number);
    return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1];
  };
  const layers = [];
  for (let e = el; e; e = e.parentElement) {
    const c = rgba(getComputedStyle(e).backgroundColor);
    if (c[3] > 0) layers.push(c);
    if (c[3] === 1) break;
  }
  let bg = [255, 255, 255];
  for (const [r, g, b, a] of layers.reverse()) {
    bg = [r, g, b].map((v, i) => v * a + bg[i] * (1 - a));
  }
  const t = rgba(getComputedStyle(el).color);
  const fg = [0, 1, 2].map((i) => t[i] * t[3] + bg[i] * (1 - t[3]));
  const lum = (rgb) => rgb.map((v) => v / 255)
    .map((v) => (v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4))
    .reduce((sum, v, i) => sum + v * [0.2126, 0.7152, 0.0722][i], 0);
  const [a, b] = [lum(fg), lum(bg)];
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}"""


def test_the_docs_page_has_a_main_heading_named_controls_and_readable_labels(
    tally: str, browser: Any
) -> None:
    """Checked with axe-core: the page had no main landmark and no h1, its server list no name,
    and its method labels, version badges and Authorize button read at 2.0-3.8:1 (AA asks
    4.5:1). What is left is Swagger UI's own structure (a summary's controls nest)."""
    context = browser.new_context(viewport=DESKTOP)
    watch = Watch()
    page = watch(context.new_page())
    page.goto(f"{tally}/api/schema")
    page.wait_for_selector(".opblock", timeout=30_000)
    assert page.locator("main h1").text_content() == "Tally API documentation"
    assert page.locator("main #swagger-ui .opblock").count() >= 8
    page.wait_for_selector("#servers[aria-label]", timeout=10_000)
    assert page.get_attribute("#servers", "aria-label") == "Server"
    labels = [
        ".opblock-summary-method",
        ".btn.authorize span",
        ".info .title small pre",
        ".info .title small.version-stamp pre",
    ]
    # No link inside an operation's button (Swagger UI's deep links put one in each).
    assert page.locator(".opblock-summary-control a[href]").count() == 0
    # An operation opened, with Try it out, and the models shown.
    page.locator(".opblock-summary-control").first.click()
    page.locator(".try-out__btn").first.click()
    page.wait_for_selector(".btn.execute")
    page.locator(".models-control").first.click()
    page.wait_for_selector(".json-schema-2020-12-expand-deep-button")
    labels += [".btn.execute", ".btn.cancel", ".parameter__in"]
    labels += [".json-schema-2020-12-expand-deep-button"]
    for selector in labels:
        ratios = page.eval_on_selector_all(selector, f"els => els.map({CONTRAST})")
        assert ratios, selector
        assert min(ratios) >= 4.5, (selector, min(ratios))
    context.close()
    watch.assert_clean()


def dashboard(tally: str, user: str, params: dict[str, Any]) -> Any:
    answer = httpx.get(
        f"{tally}/api/dashboard", params=params, headers={"authorization": f"Bearer {token(user)}"}
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def sent_and_opened(
    tally: str,
    browser: Any,
    user: str,
    project: str,
    key: str,
    events: list[dict[str, Any]],
    view: dict[str, Any],
) -> tuple[Any, Watch, Any]:
    """Sends ``events``, waits until the dashboard of ``view`` counts them all, and opens the
    dashboard page of that view, downloads allowed: (context, watch, page)."""
    sent = httpx.post(f"{tally}/api/collect", json={"events": events}, headers={"x-api-key": key})
    assert sent.status_code == 202
    asked = {"projectId": project, **view}
    wait_until(
        lambda: dashboard(tally, user, asked)["summary"]["totalEvents"] == len(events), "events"
    )
    context = browser.new_context(viewport=DESKTOP, accept_downloads=True)
    watch = Watch()
    page = watch(context.new_page())
    query = "".join(f"&{k}={v}" for k, v in view.items())
    page.goto(f"{tally}/?project={project}{query}#token={token(user)}")
    page.wait_for_selector("#summary")
    return context, watch, page


def saved(page: Any, selector: str) -> tuple[str, str]:
    with page.expect_download(timeout=30_000) as info:
        page.click(selector)
    download = info.value
    return download.suggested_filename, Path(download.path()).read_text()


ZONE = "Asia/Kathmandu"


def test_panels_and_raw_events_download_as_csv(tally: str, browser: Any) -> None:
    user = f"owner-{uuid.uuid4().hex[:8]}"
    project, key = new_project(tally, user, "Downloads")
    paths = ["/", "/pricing", "/a,b", '/q"uote', "/pricing"]
    events = [{"name": "pageview", "path": p, "visitorId": "v1"} for p in paths]
    events += [{"name": "session_end", "visitorId": "v1"}, {"name": "signup", "visitorId": "v1"}]
    sent = httpx.post(
        f"{tally}/api/collect",
        json={"events": events},
        headers={"x-api-key": key, "x-forwarded-for": "81.2.69.160"},  # GB in DB-IP's data
    )
    assert sent.status_code == 202
    # A zone of its own, so that the recent events' local times are not their UTC ones.
    moved = httpx.patch(
        f"{tally}/api/projects",
        json={"projectId": project, "timezone": ZONE},
        headers={"authorization": f"Bearer {token(user)}"},
    )
    assert moved.status_code == 200, moved.text
    view = {"projectId": project, "days": 1}
    wait_until(lambda: dashboard(tally, user, view)["summary"]["totalEvents"] == 7, "the events")

    context = browser.new_context(viewport=DESKTOP, accept_downloads=True)
    watch = Watch()
    page = watch(context.new_page())
    page.goto(f"{tally}/?project={project}#token={token(user)}")
    page.wait_for_selector("[data-csv]")

    # A breakdown panel's rows, once loaded: named after the dimension and the window.
    page.wait_for_selector("[data-panel=pages][data-state=ready]")
    name, text = saved(page, f'[data-csv="tally-{project}-path-7d.csv"]')
    assert name == f"tally-{project}-path-7d.csv"
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["path", "visitors", "pageviews", "events"]
    assert sorted(rows[1:]) == sorted(
        [
            ["/pricing", "1", "2", "2"],
            ["/", "1", "1", "1"],
            ["/a,b", "1", "1", "1"],
            ['/q"uote', "1", "1", "1"],
        ]
    )

    # Countries: the code and the name the panel shows.
    page.wait_for_selector("[data-panel=countries][data-state=ready]")
    _, text = saved(page, f'[data-csv="tally-{project}-country-7d.csv"]')
    assert list(csv.reader(io.StringIO(text))) == [
        ["country", "name", "visitors", "pageviews", "events"],
        ["GB", "United Kingdom", "1", "5", "7"],
    ]
    # Events by name: what the panel lists, without the session_end it says it leaves out.
    _, text = saved(page, f'[data-csv="tally-{project}-events-by-name-7d.csv"]')
    assert list(csv.reader(io.StringIO(text))) == [
        ["name", "events"],
        ["pageview", "5"],
        ["signup", "1"],
    ]
    # Recent events: the time as stored (UTC) and as the panel shows it (the project's zone).
    _, text = saved(page, f'[data-csv="tally-{project}-recent-events-7d.csv"]')
    recent = list(csv.DictReader(io.StringIO(text)))
    assert len(recent) == len(events)
    for row in recent:
        at = datetime.fromisoformat(row["occurred_at"]).astimezone(ZoneInfo(ZONE))
        assert row[f"local_time ({ZONE})"] == at.isoformat(" ", "milliseconds")[:23]

    name, text = saved(page, "#export-events")
    assert name.startswith(f"tally-{project}-") and name.endswith(".csv")
    stored = list(csv.DictReader(io.StringIO(text)))
    assert sorted(e["path"] for e in stored if e["name"] == "pageview") == sorted(paths)
    assert {e["project_id"] for e in stored} == {project}

    # A tab whose rows are loading or failed offers no file: the rows at hand are the other
    # tab's (the Sources rows were saved under the Channels name and header).
    page.route("**/api/breakdown?*by=channel*", lambda route: route.abort())
    page.click("[data-panel=sources] [role=tab][data-by=channel]")
    page.wait_for_selector("[data-panel=sources][data-state=error]")
    button = page.locator("[data-panel=sources] .panel-head button")
    assert button.get_attribute("data-csv") == f"tally-{project}-channel-7d.csv"
    # Said unavailable, and still a Tab stop (a disabled button is skipped without a word).
    assert button.get_attribute("aria-disabled") == "true" and button.is_disabled()
    button.focus()
    assert page.evaluate("document.activeElement.getAttribute('aria-label')") == (
        "Download CSV: Sources"
    )
    downloads: list[Any] = []
    page.on("download", lambda d: downloads.append(d))
    page.keyboard.press("Enter")
    page.wait_for_timeout(500)
    assert downloads == []
    page.unroute("**/api/breakdown?*by=channel*")
    page.click("[data-panel=sources] [role=tab][data-by=source]")
    page.wait_for_selector("[data-panel=sources][data-state=ready]")
    assert button.is_enabled()
    context.close()
    watch.assert_clean("net::ERR_FAILED")


def skipped_midnight(zone: str) -> date:
    """The latest day before today in ``zone`` whose next local midnight never happens (a DST
    change moves the clocks from 00:00 to 01:00): that day ends at the jump."""
    tz = ZoneInfo(zone)
    day = datetime.now(UTC).date() - timedelta(days=1)
    for _ in range(400):
        after = datetime.combine(day + timedelta(days=1), time(0), tzinfo=tz)
        if after.astimezone(UTC).astimezone(tz).replace(tzinfo=None) != after.replace(tzinfo=None):
            return day
        day -= timedelta(days=1)
    raise AssertionError(f"{zone} skipped no midnight in 400 days")


@pytest.mark.parametrize(
    ("zone", "day"),
    [("Atlantic/Azores", None), ("Pacific/Apia", date(2011, 12, 29))],
    ids=["azores", "apia"],
)
def test_raw_events_download_covers_a_day_that_ends_at_a_jump(
    tally: str, browser: Any, zone: str, day: date | None
):
    # Atlantic/Azores moves its clocks from 00:00 to 01:00 in March: the day before ends at
    # 01:00 UTC, and its last hour is in the next UTC day. The page asked only the day's own
    # UTC date (it put that midnight an hour early), so the download left that hour out.
    # Pacific/Apia skipped 2011-12-30 whole: 2011-12-29 ends where 2011-12-31 starts.
    day = day or skipped_midnight(zone)
    user = f"owner-{uuid.uuid4().hex[:8]}"
    made = httpx.post(
        f"{tally}/api/projects",
        json={"name": "Azores", "timezone": zone},
        headers={"authorization": f"Bearer {token(user)}"},
    )
    assert made.status_code == 201, made.text
    project, key = made.json()["projectId"], made.json()["apiKey"]
    tz = ZoneInfo(zone)
    times = {
        "/noon": datetime.combine(day, time(12), tzinfo=tz),
        "/last-hour": datetime.combine(day, time(23, 30), tzinfo=tz),
    }
    assert times["/last-hour"].astimezone(UTC).date() == day + timedelta(days=1)
    events = [
        {"name": "pageview", "path": p, "visitorId": "v1", "occurredAt": t.isoformat()}
        for p, t in times.items()
    ]
    view = {"from": day.isoformat(), "to": day.isoformat()}
    context, watch, page = sent_and_opened(tally, browser, user, project, key, events, view)
    name, text = saved(page, "#export-events")
    assert name == f"tally-{project}-{day}-{day + timedelta(days=1)}.csv"
    events = list(csv.DictReader(io.StringIO(text)))
    assert sorted(e["path"] for e in events) == ["/last-hour", "/noon"]
    context.close()
    watch.assert_clean()


def test_raw_events_download_with_a_token_too_long_for_a_cookie(tally: str, browser: Any):
    # An identity provider's token with many claims can be over 4 KB: no browser keeps a cookie
    # that long, so the download that sends the session as a cookie was refused (the page said
    # it was downloading). Such a token's file comes by a fetch with the header instead.
    user = f"owner-{uuid.uuid4().hex[:8]}-{'g' * 3000}"
    assert len(f"tally_session={token(user)}") > 4096
    project, key = new_project(tally, user, "Long token")
    events = [{"name": "pageview", "path": "/long", "visitorId": "v1"}]
    context, watch, page = sent_and_opened(tally, browser, user, project, key, events, {"days": 1})
    asked: list[str] = []
    page.on("request", lambda q: asked.append(q.method) if "/api/export?" in q.url else None)
    name, text = saved(page, "#export-events")
    assert name.startswith(f"tally-{project}-") and name.endswith(".csv")
    assert [e["path"] for e in csv.DictReader(io.StringIO(text))] == ["/long"]
    assert context.cookies() == []
    assert asked == ["GET"]  # its answer is the check: no HEAD before it
    page.get_by_text("Downloaded.").wait_for()
    context.close()
    watch.assert_clean()

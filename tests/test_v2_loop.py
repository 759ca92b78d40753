"""``POST /api/v2/query`` orders and pages in SQL, so that a result of many groups never reaches
the event loop row by row (a 270k-group breakdown held a worker's loop for 4 s: health and
collect waited behind it). Checked here:

- the order is the documented one exactly, against an independent model (tests/
  reference_filters.py) sorted by the README's rules: dimensions in byte order, metrics by the
  values the answer shows (a bounce rate of 33.33 ties with another 33.33, whatever the
  fractions, and the next key decides), every dimension after;
- pages put end to end are the one large page: no row skipped or repeated;
- a ``visit_duration`` order over a fractional total (a stated ``durationMs`` of 1234.5) is
  ordered in SQL, exactly (in units of 10^-20 ms); one over a duration out of that scale (1e21
  ms) is ordered in Python and still exact;
- structurally, not by the clock: only the page's rows come back from storage, and the work per
  row (Decimal rounding) runs in a thread, not on the event loop's.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import random
import threading
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import reference_filters as ref
from conftest import auth, new_project
from tally.storage import v2 as runner
from test_filters_wired import sent
from test_local_time import store

PATHS = ["/", "/a", "/B", "/b", "/é", "/日本", "/z", "/a/b", "/~", "/Z"]
SOURCES = ["Google", "Direct / None", "news", "日本語", "bing"]


def _traffic(now: datetime, seed: int, kind: str) -> list[ref.Ev]:
    """Sessions whose groups tie often once rounded: durations of 100-102 ms (means of .5
    rounding up, 100.33 and 100.67 rounding to the same integers), one to three pageviews.
    ``kind``: "whole" (those only), "fractional" (one of 1234.5 ms too), "outside" (and one of
    1e21 ms, out of the scale SQL orders by, query/v2.py)."""
    rng = random.Random(seed)
    events: list[ref.Ev] = []
    base = now - timedelta(days=4)
    for n in range(160):
        start = base + timedelta(minutes=17 * n, milliseconds=n)
        session = f"s{n}" if n % 11 else ""
        visitor = f"v{rng.randrange(40)}"
        country = rng.choice(["DE", "US", "NP"])
        source = rng.choice(SOURCES)
        pages = rng.choice([1, 1, 2, 3])
        for i in range(pages):
            events.append(
                ref.Ev(
                    "pageview",
                    start + timedelta(seconds=i),
                    path=rng.choice(PATHS),
                    session_id=session,
                    visitor_id=visitor,
                    country=country,
                    source=source,
                )
            )
        if session and (rng.random() < 0.8 or n in (7, 13)):
            stated: float | None = float(rng.choice([100, 101, 102]))
            if rng.random() < 0.2:
                stated = None  # measured from the session's first event
            if kind != "whole" and n == 7:
                stated = 1234.5  # a fractional total: ordered in SQL, exactly
            if kind == "outside" and n == 13:
                stated = 1e21  # out of scale: ordered in Python
            events.append(
                ref.Ev(
                    "session_end",
                    start + timedelta(seconds=pages),
                    session_id=session,
                    visitor_id=visitor,
                    country=country,
                    source=source,
                    duration_ms=stated,
                )
            )
    return events


@functools.cache
def _site(client: Any, kind: str) -> tuple[str, list[ref.Ev], list[str]]:
    project_id, _ = new_project(client, user="loop")
    now = datetime.now(UTC).replace(microsecond=0)
    events = _traffic(now, 5, kind)
    store(client, project_id, sent(events))
    last = now.date() - timedelta(days=1)
    return project_id, events, [(last - timedelta(days=8)).isoformat(), last.isoformat()]


def _reference(
    events: list[ref.Ev],
    date_range: list[str],
    metrics: list[str],
    dimensions: list[str],
    order_by: list[list[str]],
) -> list[dict[str, Any]]:
    """The model's rows sorted by the README's rules (order_by already complete)."""
    first, last = (datetime.fromisoformat(d).date() for d in date_range)
    rows = ref.v2_rows(
        events, metrics, dimensions, zone=ZoneInfo("UTC"), first_day=first, last_day=last
    )
    items = [(list(k), v) for k, v in rows.items()]
    for name, direction in reversed(order_by):
        if name in dimensions:
            i = dimensions.index(name)
            key: Any = lambda item, i=i: item[0][i].encode()  # noqa: E731
        else:
            j = metrics.index(name)
            key = lambda item, j=j: item[1][j]  # noqa: E731
        items.sort(key=key, reverse=direction == "desc")
    return [{"dimensions": d, "metrics": m} for d, m in items]


def _post(client: Any, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/api/v2/query", json=body, headers=auth("loop"))
    assert response.status_code == 200, response.text
    return response.json()


ALL = ["visitors", "visits", "pageviews", "events", "bounce_rate", "visit_duration"]
CASES = [
    (ALL, ["entryPage"], None),
    (ALL, ["entryPage"], [["visit_duration", "desc"]]),
    (ALL, ["exitPage", "source"], [["bounce_rate", "asc"], ["visits", "desc"]]),
    (["visit_duration", "visitors"], ["source", "entryPage"], [["visit_duration", "asc"]]),
    (["bounce_rate", "pageviews"], ["time:day", "exitPage"], [["bounce_rate", "desc"]]),
    (["visitors", "events"], ["path", "country"], [["path", "desc"]]),
    (["pageviews"], ["path"], [["pageviews", "asc"]]),
    (["events", "visits"], ["country", "path"], None),
]


@pytest.mark.parametrize("kind", ["whole", "fractional", "outside"])
@pytest.mark.parametrize(("metrics", "dimensions", "order_by"), CASES)
def test_sql_order_and_pages_are_the_documented_order_exactly(
    client, metrics, dimensions, order_by, kind
):
    project_id, events, date_range = _site(client, kind)
    body: dict[str, Any] = {
        "site_id": project_id,
        "metrics": metrics,
        "date_range": date_range,
        "dimensions": dimensions,
    }
    if order_by:
        body["order_by"] = order_by
    whole = _post(client, body)
    complete = whole["query"]["order_by"]
    want = _reference(events, date_range, metrics, dimensions, complete)
    assert len(want) > 8  # not vacuous
    assert whole["results"] == want
    # Pages end to end are the one large answer: none skipped, none repeated, same order.
    pages: list[dict[str, Any]] = []
    for offset in range(0, len(want) + 7, 7):
        page = _post(client, {**body, "pagination": {"limit": 7, "offset": offset}})["results"]
        assert len(page) == min(7, max(0, len(want) - offset))
        pages += page
    assert pages == want


def test_rounded_metrics_tie_and_the_next_key_decides(client):
    """The data has groups whose exact means differ but show the same number: the order by the
    shown number must fall through to the dimension, as the README's rules say."""
    project_id, _events, date_range = _site(client, "whole")
    body = {
        "site_id": project_id,
        "metrics": ["visit_duration", "bounce_rate"],
        "date_range": date_range,
        "dimensions": ["entryPage", "source"],
        "order_by": [["visit_duration", "desc"]],
    }
    results = _post(client, body)["results"]
    shown = [r["metrics"][0] for r in results]
    assert len(shown) != len(set(shown))  # ties exist
    for a, b in itertools.pairwise(results):
        if a["metrics"][0] == b["metrics"][0]:
            assert [d.encode() for d in a["dimensions"]] < [d.encode() for d in b["dimensions"]]


def test_an_empty_aggregate_is_zeros_and_its_second_page_empty(client, user):
    project_id, _ = new_project(client, user=user)
    body = {"site_id": project_id, "metrics": ["visitors", "bounce_rate"], "date_range": "7d"}
    response = client.post("/api/v2/query", json=body, headers=auth(user))
    assert response.json()["results"] == [{"dimensions": [], "metrics": [0, 0.0]}]
    body["pagination"] = {"limit": 1, "offset": 1}
    response = client.post("/api/v2/query", json=body, headers=auth(user))
    assert response.json()["results"] == []


def test_only_the_page_reaches_python_and_off_the_event_loop(client, monkeypatch):
    """Structural: storage returns the page's rows only (not every group), and the per-row work
    (Decimal rounding of bounce_rate and visit_duration) runs where no event loop runs."""
    project_id, events, date_range = _site(client, "whole")
    storage = client.app.state.storage
    returned: list[int] = []
    original = storage.report

    async def report(sql: str, parameters: Any = None) -> Any:
        rows = await original(sql, parameters)
        returned.append(len(rows))
        return rows

    monkeypatch.setattr(storage, "report", report)
    threads: list[tuple[str, bool]] = []
    values = runner._values

    def watched(*args: Any) -> Any:
        try:
            asyncio.get_running_loop()
            on_loop = True
        except RuntimeError:
            on_loop = False
        threads.append((threading.current_thread().name, on_loop))
        return values(*args)

    monkeypatch.setattr(runner, "_values", watched)
    body = {
        "site_id": project_id,
        "metrics": ALL,
        "date_range": date_range,
        "dimensions": ["entryPage", "source"],
        "order_by": [["bounce_rate", "desc"]],
        "pagination": {"limit": 3, "offset": 2},
    }
    groups = len(_reference(events, date_range, ALL, ["entryPage", "source"], []))
    assert groups > 20
    results = _post(client, body)["results"]
    assert len(results) == 3
    assert returned == [3]  # one query, the page's three rows
    assert len(threads) == 3 and not any(on_loop for _, on_loop in threads), threads


@pytest.mark.parametrize(("kind", "in_python"), [("fractional", []), ("outside", [False])])
def test_a_duration_out_of_scale_is_ordered_in_python_off_the_loop(
    client, monkeypatch, kind, in_python
):
    """The one case SQL cannot order exactly, a stated duration out of its scale (1e21 ms):
    every group is read, then sorted in a thread. A fractional one (1234.5 ms) SQL orders."""
    project_id, _events, date_range = _site(client, kind)
    sorts: list[bool] = []
    ordered_page = runner._ordered_page

    def watched(*args: Any) -> Any:
        try:
            asyncio.get_running_loop()
            sorts.append(True)
        except RuntimeError:
            sorts.append(False)
        return ordered_page(*args)

    monkeypatch.setattr(runner, "_ordered_page", watched)
    body = {
        "site_id": project_id,
        "metrics": ["visit_duration"],
        "date_range": date_range,
        "dimensions": ["entryPage"],
        "order_by": [["visit_duration", "desc"]],
    }
    _post(client, body)
    assert sorts == in_python
    body["order_by"] = [["visits", "desc"]]  # not by visit_duration: SQL orders, exactly
    body["metrics"] = ["visit_duration", "visits"]
    _post(client, body)
    assert sorts == in_python

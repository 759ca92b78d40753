"""A report over ``TALLY_REPORT_MEMORY_MB`` is 400 with a hint that fits the endpoint and the
request: only what this request can change (a v2 query's dimensions, a range longer than a day,
filters to narrow when there are some), never "fewer dimensions" to a one-dimension breakdown or
"a narrower filter" to an unfiltered one (they all got the same sentence before)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import pytest

import reference_filters as ref
from conftest import auth, new_project
from tally.http.errors import report_hints
from test_filters_wired import sent
from test_local_time import store

PREFIX = "needs more memory than one report may use (1 MiB, TALLY_REPORT_MEMORY_MB); "
RAISE = "have the server's TALLY_REPORT_MEMORY_MB raised"


@pytest.fixture(scope="module")
def hungry(tmp_path_factory: pytest.TempPathFactory, chdb_path: Any) -> Any:
    """An app whose reports may use 1 MiB, with a project of 20000 distinct pages and visits."""
    from conftest import make_settings, running

    settings = make_settings(chdb_path, tmp_path_factory.mktemp("hungry"), report_memory_mb=1)
    with running(settings) as client:
        project_id, _ = new_project(client, user="hungry")
        now = datetime.now(UTC).replace(microsecond=0)
        events = [
            ref.Ev(
                "pageview",
                now - timedelta(hours=1 + i % 40, seconds=i),
                path=f"/page/{i}",
                referrer=f"https://site{i}.example/",
                session_id=f"s{i}",
                visitor_id=f"v{i}",
                source=f"site{i}.example",
            )
            for i in range(20000)
        ]
        store(client, project_id, sent(events))
        yield client, project_id


def _refused(response: Any, error: str) -> str:
    assert response.status_code == 400, response.text[:300]
    body = response.json()
    assert body["error"] == error
    [detail] = body["details"]
    assert detail["path"] == "$"
    assert detail["message"].startswith(PREFIX), detail["message"]
    return detail["message"][len(PREFIX) :]


def test_v2_hints_name_its_dimensions_range_visit_metrics_and_filters(hungry):
    client, project_id = hungry
    body = {
        "site_id": project_id,
        "metrics": ["visitors", "visits", "pageviews"],
        "date_range": "28d",
        "dimensions": ["time:hour", "event:page", "referrer", "visit:entry_page"],
    }
    hint = _refused(
        client.post("/api/v2/query", json=body, headers=auth("hungry")), "Invalid payload"
    )
    assert hint == (
        "ask for fewer dimensions (this query has 4), time:day instead of time:hour, a shorter "
        "date_range (this one has 28 days), no visits (these read every visit whole) or a "
        "filter that leaves fewer rows, or " + RAISE
    )
    body["filters"] = [["contains", "event:page", ["page"]]]
    hint = _refused(
        client.post("/api/v2/query", json=body, headers=auth("hungry")), "Invalid payload"
    )
    assert "narrower filters" in hint and "a filter that" not in hint


def test_an_unfiltered_one_dimension_breakdown_is_not_told_of_dimensions_or_narrower_filters(
    hungry,
):
    client, project_id = hungry
    answer = client.get(
        f"/api/breakdown?projectId={project_id}&by=path&days=7&limit=1000", headers=auth("hungry")
    )
    hint = _refused(answer, "Invalid query")
    assert hint == (
        "ask for a shorter range (this one has 7 days) or a filter that leaves fewer path "
        "values, or " + RAISE
    )
    assert "dimension" not in hint and "narrower" not in hint


def test_a_filtered_dashboard_is_told_of_its_range_and_filters(hungry):
    client, project_id = hungry
    filters = quote(json.dumps([["contains", "path", ["page"]]]))
    answer = client.get(
        f"/api/dashboard?projectId={project_id}&from={_days_ago(20)}&to={_days_ago(0)}"
        f"&filters={filters}",
        headers=auth("hungry"),
    )
    hint = _refused(answer, "Invalid query")
    assert hint == "ask for a shorter range (this one has 21 days) or narrower filters, or " + RAISE


def _days_ago(n: int) -> str:
    return (datetime.now(UTC).date() - timedelta(days=n)).isoformat()


@pytest.mark.parametrize(
    ("dimensions", "metrics", "days", "filtered", "hints"),
    [
        ((), ("visitors",), 1, False, []),  # nothing to ask for but the setting
        (("path",), ("visitors",), 1, False, ["a filter that leaves fewer rows"]),
        (("path",), ("events",), 1, True, ["narrower filters"]),
        (
            ("source", "time:day"),
            ("bounce_rate", "visit_duration", "visitors"),
            366,
            False,
            [
                "fewer dimensions (this query has 2)",
                "a shorter date_range (this one has 366 days)",
                "no bounce_rate or visit_duration (these read every visit whole)",
                "a filter that leaves fewer rows",
            ],
        ),
    ],
)
def test_v2_hints_fit_the_query(dimensions, metrics, days, filtered, hints):
    assert report_hints(dimensions, metrics, days, filtered) == hints

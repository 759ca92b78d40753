"""Sentences of issues 16 and 17 about the API that no other test pinned down over HTTP: the exact
list of breakdown dimensions, the order of tied rows, the bounds and defaults of days and limit,
a project that counts bots, and a comparison with an empty earlier range (change null)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import pytest

from conftest import auth, new_project
from reference import Sent
from tally.app import create_app
from tally.config import Settings
from test_dimensions import GOOGLEBOT
from test_local_time import store

# The issue's list of `by` values, as it is written.
ISSUE_BY = (
    "path entryPage exitPage source channel referrer utmSource utmMedium utmCampaign utmContent "
    "utmTerm country browser os deviceType event"
)
ISSUE_DIMENSIONS = set(ISSUE_BY.split())


def test_breakdown_dimensions_are_the_issues_and_the_documents():
    from tally.domain.filters import DIMENSIONS as FILTER_DIMENSIONS
    from tally.query.breakdown import DIMENSIONS

    assert set(DIMENSIONS) == ISSUE_DIMENSIONS
    assert set(FILTER_DIMENSIONS) == ISSUE_DIMENSIONS  # filters take every `by`
    document = create_app(Settings(jwt_secret="s" * 32)).openapi_schema.to_schema()
    (by,) = [
        p for p in document["paths"]["/api/breakdown"]["get"]["parameters"] if p["name"] == "by"
    ]
    schema = by["schema"]
    if "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    assert set(schema["enum"]) == ISSUE_DIMENSIONS


def _pageview(at: datetime, path: str, visitor: str, session: str) -> Sent:
    return Sent("pageview", at, path, "", session, visitor, "Chrome", "desktop", country="DE")


def test_breakdown_rows_by_visitors_then_pageviews_descending_then_value(client, user):
    """Visitors first, pageviews break their ties, the value (ascending, byte order) theirs."""
    project_id, _ = new_project(client, user=user)
    now = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    plan = {  # path: (visitors, pageviews)
        "/few-visitors-many-views": (1, 6),
        "/b": (2, 3),
        "/a": (2, 3),
        "/B": (2, 3),
        "/more-views": (2, 4),
        "/most-visitors": (3, 3),
    }
    events = []
    n = 0
    for path, (visitors, views) in plan.items():
        for i in range(views):
            n += 1
            events.append(_pageview(now - timedelta(seconds=n), path, f"v{i % visitors}", f"s{n}"))
    store(client, project_id, events)
    response = client.get(
        f"/api/breakdown?projectId={project_id}&by=path&days=2", headers=auth(user)
    )
    assert response.status_code == 200, response.text
    assert [r["value"] for r in response.json()["rows"]] == [
        "/most-visitors",
        "/more-views",
        "/B",
        "/a",
        "/b",
        "/few-visitors-many-views",
    ]


def test_breakdown_days_and_limit_defaults_and_bounds(client, user):
    project_id, _ = new_project(client, user=user)
    now = datetime.now(UTC)
    # 12 paths today; one path 13 days ago (inside the default 14) and one 14 days ago (outside).
    events = [
        _pageview(now - timedelta(seconds=i + 1), f"/p{i:02}", f"v{i}", "") for i in range(12)
    ]
    events.append(_pageview(now - timedelta(days=13), "/day-13", "old", ""))
    events.append(_pageview(now - timedelta(days=14), "/day-14", "older", ""))
    store(client, project_id, events)

    def rows(query: str) -> list[str]:
        response = client.get(
            f"/api/breakdown?projectId={project_id}&by=path{query}", headers=auth(user)
        )
        assert response.status_code == 200, (query, response.text)
        return [r["value"] for r in response.json()["rows"]]

    assert len(rows("")) == 10  # default limit
    assert "/day-13" in rows("&limit=1000") and "/day-14" not in rows("&limit=1000")  # 14 days
    assert "/day-14" in rows("&limit=1000&days=15")
    assert len(rows("&limit=1")) == 1
    assert len(rows("&limit=1000&days=90")) == 14
    assert "/day-13" not in rows("&limit=1000&days=1")
    for bad in ("&days=0", "&days=91", "&days=1.5", "&limit=0", "&limit=1001", "&limit=ten"):
        response = client.get(
            f"/api/breakdown?projectId={project_id}&by=path{bad}", headers=auth(user)
        )
        assert response.status_code == 400, (bad, response.text)
        assert response.json()["error"] == "Invalid query"
        assert response.json()["details"], bad


def test_unknown_by_is_400_invalid_query_naming_by(client, user):
    project_id, _ = new_project(client, user=user)
    response = client.get(f"/api/breakdown?projectId={project_id}&by=city", headers=auth(user))
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "Invalid query"
    assert any("by" in d["path"] or "by" in d["message"] for d in body["details"]), body
    # In plain words: the values it takes.
    assert any(d["message"].startswith("must be one of path, ") for d in body["details"]), body
    # the same words for a value the decoder quotes otherwise (it holds an apostrophe)
    response = client.get(f"/api/breakdown?projectId={project_id}&by=it's", headers=auth(user))
    assert response.status_code == 400
    assert response.json()["details"][0]["message"].startswith("must be one of path, "), (
        response.text
    )
    response = client.get(
        f"/api/dashboard?projectId={project_id}&compare=previous_month", headers=auth(user)
    )
    assert response.status_code == 400
    assert {"path": "$.compare", "message": "must be one of previous_period, previous_year"} in (
        response.json()["details"]
    ), response.text


@pytest.mark.parametrize(
    "agent",
    [
        "curl/8.5.0",
        "python-requests/2.32.3",
        "python-httpx/0.27.0",
        "Go-http-client/1.1",
        "okhttp/4.12.0",
        "node-fetch/1.0 (+https://github.com/bitinn/node-fetch)",
    ],
)
def test_bots_left_out_until_the_project_counts_them(client, user, agent):
    """Collected over HTTP: a crawler's event is left out and counted in botEvents; an HTTP
    library's counts. With excludeBots false the crawler counts too and botEvents is 0."""
    project_id, key = new_project(client, user=user)
    for ua, name in ((GOOGLEBOT, "crawled"), (agent, "scripted")):
        sent = client.post(
            "/api/collect",
            json={"events": [{"name": name, "visitorId": name}]},
            headers={"x-api-key": key, "user-agent": ua},
        )
        assert sent.status_code == 202, sent.text

    def numbers() -> tuple[dict, list[str]]:
        board = client.get(f"/api/dashboard?projectId={project_id}&days=2", headers=auth(user))
        assert board.status_code == 200, board.text
        rows = client.get(
            f"/api/breakdown?projectId={project_id}&by=event&days=2", headers=auth(user)
        )
        assert rows.status_code == 200, rows.text
        return board.json()["summary"], sorted(r["value"] for r in rows.json()["rows"])

    summary, names = numbers()
    assert (summary["totalEvents"], summary["uniqueVisitors"], summary["botEvents"]) == (1, 1, 1)
    assert names == ["scripted"]
    patched = client.patch(
        "/api/projects", json={"projectId": project_id, "excludeBots": False}, headers=auth(user)
    )
    assert patched.status_code == 200 and patched.json()["excludeBots"] is False
    summary, names = numbers()
    assert (summary["totalEvents"], summary["uniqueVisitors"], summary["botEvents"]) == (2, 2, 0)
    assert names == ["crawled", "scripted"]


def test_comparison_with_an_empty_earlier_range_has_null_changes(client, user):
    """previous_period of a range whose earlier days are empty: the comparison's shape, zeros,
    and null (not 0, not infinity) where the earlier value is 0; the same for breakdown rows."""
    project_id, _ = new_project(client, user=user)
    day = datetime.now(UTC).date() - timedelta(days=3)
    noon = datetime(day.year, day.month, day.day, 12, tzinfo=UTC)
    events = [
        _pageview(noon, "/", "v1", "s1"),
        _pageview(noon + timedelta(seconds=1), "/next", "v1", "s1"),
    ]
    store(client, project_id, events)
    query = f"projectId={project_id}&from={day}&to={day}&compare=previous_period"
    board = client.get(f"/api/dashboard?{query}", headers=auth(user))
    assert board.status_code == 200, board.text
    comparison = board.json()["comparison"]
    assert set(comparison) == {"from", "to", "summary", "timeline", "change"}
    yesterday = (day - timedelta(days=1)).isoformat()
    assert (comparison["from"], comparison["to"]) == (yesterday, yesterday)
    assert comparison["summary"]["totalEvents"] == 0
    assert [p["day"] for p in comparison["timeline"]] == [yesterday]
    assert set(comparison["change"]) == set(board.json()["summary"])
    assert all(v is None for v in comparison["change"].values()), comparison["change"]
    germany = quote('[["is","country",["DE"]]]')
    rows = client.get(f"/api/breakdown?{query}&by=path&filters={germany}", headers=auth(user))
    assert rows.status_code == 200, rows.text
    assert rows.json()["rows"] == [
        {
            "value": path,
            "visitors": 1,
            "pageviews": 1,
            "events": 1,
            "comparison": {
                "visitors": 0,
                "pageviews": 0,
                "events": 0,
                "change": {"visitors": None, "pageviews": None, "events": None},
            },
        }
        for path in ("/", "/next")
    ]


@pytest.mark.parametrize("date_range", ["7d", "30d", "day", "month", ["2026-01-01", "2026-01-31"]])
def test_v2_date_ranges_over_http_and_another_users_project(client, user, date_range):
    project_id, _ = new_project(client, user=user)
    body = {"site_id": project_id, "metrics": ["visitors", "visit_duration"]}
    answer = client.post(
        "/api/v2/query", json={**body, "date_range": date_range}, headers=auth(user)
    )
    assert answer.status_code == 200, answer.text
    # an aggregate answers one row, zeros over a range without events (as Plausible's)
    assert answer.json()["results"] == [{"dimensions": [], "metrics": [0, 0]}]
    assert set(answer.json()) == {"results", "meta", "query"}
    other = client.post(
        "/api/v2/query", json={**body, "date_range": date_range}, headers=auth(f"{user}-other")
    )
    assert (other.status_code, other.json()) == (404, {"error": "Project not found"})

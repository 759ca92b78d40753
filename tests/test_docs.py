"""The SQL that docs/operations.md offers analysts runs as written on the real engine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "operations.md"
BLOCKS = re.findall(r"```sql\n(.*?)```", DOC.read_text(), flags=re.S)
QUERIES = [b for b in BLOCKS if b.lstrip().upper().startswith("SELECT")]


def test_the_doc_has_examples():
    assert len(QUERIES) >= 5


@pytest.mark.parametrize("sql", QUERIES, ids=[f"example {i}" for i in range(len(QUERIES))])
def test_documented_query_runs(client, sql):
    storage = client.app.state.storage
    storage.query(sql.replace("tally.", f"{storage.database}."))


def example(title: str) -> str:
    """The SQL block that follows the paragraph starting with ``title``."""
    text = DOC.read_text()
    return re.search(re.escape(title) + r".*?```sql\n(.*?)```", text, flags=re.S).group(1)


@pytest.mark.parametrize(
    "title", ["Visitors and pageviews by channel and country", "Campaigns that brought visitors"]
)
def test_documented_visitor_counts_leave_out_events_without_a_visitor(client, title):
    """Visitors are distinct non-empty visitor ids (the README's definition): two visitors and an
    event sent without one are two visitors, not three; a bot's event is none."""
    from conftest import new_project

    project_id, key = new_project(client, user="docs-analyst")
    url = "https://site.example/?utm_campaign=launch&utm_source=news&utm_medium=email"
    events = [
        {"name": "pageview", "path": "/", "url": url, "visitorId": "a"},
        {"name": "pageview", "path": "/", "url": url, "visitorId": "b"},
        {"name": "pageview", "path": "/", "url": url},
    ]
    response = client.post("/api/collect", json={"events": events}, headers={"x-api-key": key})
    assert response.status_code == 202
    bot = {"user-agent": "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"}
    crawled = [{"name": "pageview", "path": "/", "url": url, "visitorId": "crawler"}]
    response = client.post(
        "/api/collect", json={"events": crawled}, headers={"x-api-key": key, **bot}
    )
    assert response.status_code == 202
    storage = client.app.state.storage
    sql = example(title).replace("tally.", f"{storage.database}.")
    rows = storage.query(sql.replace("0123456789abcdef01234567", project_id))
    assert [row[-2 if "pageviews" in sql else -1] for row in rows] == [2]

"""GET /api/breakdown against the reference model (tests/reference.py): every dimension, event and
session dimensions, sessions crossing the window's edge, events without a session, bots, ties."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta

import pytest

from conftest import auth, new_project
from reference import Sent, breakdown
from tally.query import Query
from tally.query.breakdown import DIMENSIONS
from tally.storage.breakdown import fetch_breakdown
from test_local_time import store

SOURCES = [
    # (source, channel, utm_source, utm_medium, utm_campaign, utm_content, utm_term)
    ("Google", "Organic Search", "", "", "", "", ""),
    ("Direct / None", "Direct", "", "", "", "", ""),
    ("news", "Email", "news", "email", "spring", "hero", ""),
    ("Twitter", "Organic Social", "", "", "", "", ""),
    ("ads", "Paid Search", "ads", "cpc", "brand", "", "tally"),
    ("日本語", "Referral", "", "", "", "", ""),
]
PATHS = ["/", "/pricing", "/docs", "/blog/ß", "/emoji/🎉", "/a'); DROP TABLE events; --"]


def traffic(now: datetime, seed: int) -> list[Sent]:
    rng = random.Random(seed)
    events: list[Sent] = []
    t = now - timedelta(days=9)
    used: set[datetime] = set()

    def at(moment: datetime) -> datetime:
        moment = moment.replace(microsecond=(moment.microsecond // 1000) * 1000)
        while moment in used or moment > now - timedelta(seconds=1):
            moment -= timedelta(milliseconds=1)
        used.add(moment)
        return moment

    for n in range(120):
        start = t + timedelta(hours=rng.uniform(0, 9 * 24))
        session = f"s{n}" if rng.random() > 0.15 else ""
        visitor = f"v{rng.randrange(30)}" if rng.random() > 0.1 else ""
        source = SOURCES[rng.randrange(len(SOURCES))]
        country = rng.choice(["DE", "US", "Unknown", "NP"])
        browser, os, device = rng.choice(
            [
                ("Chrome", "Windows", "desktop"),
                ("Safari", "iOS", "mobile"),
                ("Firefox", "Linux", "desktop"),
            ]
        )
        bot = rng.random() < 0.1
        moment = start
        for i in range(rng.choice([1, 2, 3, 4])):
            name = "pageview" if i == 0 or rng.random() < 0.7 else rng.choice(["signup", "click"])
            later = (
                source if i == 0 else SOURCES[rng.randrange(len(SOURCES))]
            )  # only the first counts
            events.append(
                Sent(
                    name,
                    at(moment),
                    rng.choice(PATHS) if name == "pageview" or rng.random() < 0.3 else "",
                    "https://ref.example/x" if i == 0 and rng.random() < 0.5 else "",
                    session,
                    visitor,
                    browser,
                    device,
                    is_bot=bot,
                    os=os,
                    country=country,
                    **dict(
                        zip(
                            (
                                "source",
                                "channel",
                                "utm_source",
                                "utm_medium",
                                "utm_campaign",
                                "utm_content",
                                "utm_term",
                            ),
                            later,
                            strict=True,
                        )
                    ),
                )
            )
            moment += timedelta(minutes=rng.uniform(0.5, 20))
        if session and rng.random() < 0.5:
            events.append(
                Sent(
                    "session_end",
                    at(moment),
                    "",
                    "",
                    session,
                    visitor,
                    browser,
                    device,
                    is_bot=bot,
                    os=os,
                    country=country,
                )
            )
    # A session that starts before the window and goes on inside it: its values in the window
    # come from its first event in the window.
    first_day = (now - timedelta(days=6)).replace(hour=0, minute=0, second=0, microsecond=0)
    for delta, path, src in [
        (-60, "/before", SOURCES[2]),
        (30, "/inside", SOURCES[0]),
        (90, "/last", SOURCES[3]),
    ]:
        events.append(
            Sent(
                "pageview",
                at(first_day + timedelta(seconds=delta)),
                path,
                "",
                "edge",
                "edge-v",
                "Chrome",
                "desktop",
                source=src[0],
                channel=src[1],
                utm_source=src[2],
                country="FR",
                os="macOS",
            )
        )
    return events


def answer(client, project_id: str, now: datetime, days: int, by: str, limit: int, bots: bool):
    query = Query(project_id, days, now, exclude_bots=bots, dimension=by, limit=limit)
    rows = asyncio.run(fetch_breakdown(client.app.state.storage, query))
    return {
        "by": by,
        "rows": [
            {"value": v, "visitors": int(u), "pageviews": int(p), "events": int(e)}
            for v, u, p, e in rows
        ],
    }


def test_every_dimension_matches_the_reference(client):
    project_id, _ = new_project(client)
    now = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    events = traffic(now, seed=3)
    store(client, project_id, events)
    other_project, _ = new_project(client, user="bob")
    store(client, other_project, traffic(now, seed=4))  # another tenant in the same tables
    for by in DIMENSIONS:
        for days, limit, bots in ((7, 10, True), (1, 1000, True), (14, 3, False)):
            expected = breakdown(events, now, days, by, limit, exclude_bots=bots)
            got = answer(client, project_id, now, days, by, limit, bots)
            assert got == expected, (by, days, limit, bots)
    assert breakdown(events, now, 7, "entryPage")["rows"]  # the suite is not vacuous


def test_breakdown_over_http(client):
    project_id, _ = new_project(client)
    now = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=30)
    events = traffic(now, seed=8)
    store(client, project_id, events)
    for by, query in (("source", "&days=7&limit=3"), ("country", ""), ("exitPage", "&days=90")):
        response = client.get(
            f"/api/breakdown?projectId={project_id}&by={by}{query}", headers=auth("alice")
        )
        assert response.status_code == 200, response.text
        days = int(query.split("days=")[1].split("&")[0]) if "days=" in query else 14
        limit = int(query.split("limit=")[1]) if "limit=" in query else 10
        assert response.json() == breakdown(events, now, days, by, limit)


@pytest.mark.parametrize(
    "query",
    ["&by=city", "&by=", "&by=path&limit=0", "&by=path&limit=1001", "&by=path&days=91", ""],
)
def test_bad_breakdown_queries_are_refused(client, query):
    project_id, _ = new_project(client)
    response = client.get(f"/api/breakdown?projectId={project_id}{query}", headers=auth("alice"))
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "Invalid query"


def test_breakdown_of_another_users_project_is_not_found(client):
    project_id, _ = new_project(client)
    response = client.get(f"/api/breakdown?projectId={project_id}&by=path", headers=auth("eve"))
    assert response.status_code == 404 and response.json() == {"error": "Project not found"}
    assert client.get(f"/api/breakdown?projectId={project_id}&by=path").status_code == 401

"""Issue 17 wired: filters, from/to ranges and comparison on GET /api/dashboard and
GET /api/breakdown, every number checked against tests/reference_filters.py (an independent
model) for every dimension and operator, with unicode and SQL-looking values, sessions crossing
the range's edges, events without a session, bots and session_end with and without a duration."""

from __future__ import annotations

import asyncio
import json
import random
from datetime import UTC, date, datetime, timedelta
from urllib.parse import quote
from zoneinfo import ZoneInfo

import msgspec
import pytest

import reference_filters as ref
from conftest import auth, new_project
from reference import Sent
from tally.domain.filters import DIMENSIONS, parse_filters
from tally.http.views import build_dashboard
from tally.query import Query
from tally.storage import dashboard as runner
from tally.storage.breakdown import fetch_breakdown
from test_local_time import store

SOURCES = [
    ("Google", "Organic Search", "", "", "", "", ""),
    ("Direct / None", "Direct", "", "", "", "", ""),
    ("news", "Email", "news", "email", "spring", "hero", ""),
    ("日本語", "Referral", "", "", "", "", ""),
    ("x' OR 1=1 --", "Paid Search", "ads%", "cpc_", "Ünïcode", "", "tally"),
]
UTM = ("source", "channel", "utm_source", "utm_medium", "utm_campaign", "utm_content", "utm_term")
PATHS = ["/", "/pricing", "/Blog/ß", "/blog/émoji🎉", "/a'); DROP TABLE events; --", "/docs%_"]
OPS = ("is", "is_not", "contains", "contains_not")


def traffic(now: datetime, seed: int) -> list[ref.Ev]:
    rng = random.Random(seed)
    used: set[datetime] = set()
    events: list[ref.Ev] = []

    def at(moment: datetime) -> datetime:
        moment = moment.replace(microsecond=(moment.microsecond // 1000) * 1000)
        while moment in used or moment > now - timedelta(seconds=1):
            moment -= timedelta(milliseconds=1)
        used.add(moment)
        return moment

    for n in range(90):
        moment = now - timedelta(hours=rng.uniform(0, 10 * 24))
        session = f"s{n}" if rng.random() > 0.15 else ""
        visitor = f"v{rng.randrange(25)}" if rng.random() > 0.1 else ""
        country = rng.choice(["DE", "US", "NP", ""])
        browser, os, device = rng.choice(
            [
                ("Chrome", "Windows", "desktop"),
                ("Safari", "iOS", "mobile"),
                ("Fïrefox", "Linux", ""),
            ]
        )
        bot = rng.random() < 0.08
        for i in range(rng.choice([1, 2, 3, 4])):
            name = "pageview" if i == 0 or rng.random() < 0.7 else rng.choice(["signup", "klick"])
            utm = SOURCES[rng.randrange(len(SOURCES))]
            events.append(
                ref.Ev(
                    name,
                    at(moment),
                    path=rng.choice(PATHS) if name == "pageview" or rng.random() < 0.3 else "",
                    referrer="https://réf.example/x" if rng.random() < 0.4 else "",
                    session_id=session,
                    visitor_id=visitor,
                    browser=browser,
                    os=os,
                    device_type=device,
                    country=country,
                    is_bot=bot,
                    **dict(zip(UTM, utm, strict=True)),
                )
            )
            moment += timedelta(minutes=rng.uniform(0.5, 30))
        if rng.random() < 0.5:
            stated = rng.choice([None, 1234.5, 60000.0])
            events.append(
                ref.Ev(
                    "session_end",
                    at(moment),
                    session_id=session,
                    visitor_id=visitor,
                    browser=browser,
                    is_bot=bot,
                    duration_ms=stated,
                )
            )
    return events


def sent(events: list[ref.Ev]) -> list[Sent]:
    out = []
    for e in events:
        meta = {} if e.duration_ms is None else {"durationMs": e.duration_ms}
        out.append(
            Sent(
                e.name,
                e.occurred_at,
                e.path,
                e.referrer,
                e.session_id,
                e.visitor_id,
                e.browser,
                e.device_type,
                meta,
                e.is_bot,
                os=e.os,
                **{c: getattr(e, c) for c in (*UTM, "country")},
            )
        )
    return out


def filters_for(events: list[ref.Ev]) -> list[list]:
    """Every dimension with every operator, values taken from the data (and some absent)."""
    out = []
    for name, dim in DIMENSIONS.items():
        column = dim.column if name not in ("entryPage", "exitPage") else "path"
        present = sorted({getattr(e, column) for e in events if getattr(e, column)})
        value = present[len(present) // 2] if present else "none"
        part = value[1:4].upper() or value
        for op in OPS:
            vals = [value, "' OR ''='"] if op.startswith("is") else [part, "%_"]
            out.append([op, name, vals])
    out.append([["is", "source", ["日本語", "x' OR 1=1 --"]], ["contains", "path", ["BLOG"]]])
    return out


def as_tuple(flt: list) -> list[tuple]:
    flts = flt if isinstance(flt[0], list) else [flt]
    return [(op, dim, tuple(vals)) for op, dim, vals in flts]


def got_dashboard(client, query: Query) -> dict:
    rows = asyncio.run(runner.fetch(client.app.state.storage, query))
    return msgspec.to_builtins(build_dashboard(rows, query))


def check_dashboard(got: dict, want: dict) -> None:
    for key in want:
        if key == "recentEvents":
            mine = [(r["name"], r["path"], r["visitorId"]) for r in got[key]]
            assert mine == [(n, p, v) for n, p, v, _ in want[key]], key
        else:
            assert got[key] == want[key], key


@pytest.fixture(scope="module")
def site(client):
    project_id, _ = new_project(client)
    now = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=2)
    events = traffic(now, seed=17)
    store(client, project_id, sent(events))
    other, _ = new_project(client, user="bob")
    store(client, other, sent(traffic(now, seed=18)))  # another tenant in the same tables
    return project_id, now, events


def test_every_filter_on_the_dashboard_matches_the_reference(client, site):
    project_id, now, events = site
    for raw in filters_for(events):
        filters = parse_filters(json.dumps(raw if isinstance(raw[0], list) else [raw]))
        query = Query(project_id, 7, now, filters=filters)
        want = ref.dashboard(
            events,
            as_tuple(raw),
            zone=ZoneInfo("UTC"),
            first_day=query.first_day,
            last_day=query.last_day,
            now=now,
        )
        check_dashboard(got_dashboard(client, query), want)
    assert want["summary"]["totalEvents"]  # the last (combined) filter is not vacuous


def test_every_filter_on_breakdowns_matches_the_reference(client, site):
    project_id, now, events = site
    names = list(DIMENSIONS)
    nonempty = 0
    for i, raw in enumerate(filters_for(events)):
        filters = parse_filters(json.dumps(raw if isinstance(raw[0], list) else [raw]))
        for by in {names[i % len(names)], names[(i * 7 + 3) % len(names)], "entryPage"}:
            query = Query(project_id, 7, now, filters=filters, dimension=by, limit=1000)
            rows = asyncio.run(fetch_breakdown(client.app.state.storage, query))
            got = [
                {"value": v, "visitors": int(u), "pageviews": int(p), "events": int(e)}
                for v, u, p, e in rows
            ]
            want = ref.breakdown(
                events,
                by,
                as_tuple(raw),
                zone=ZoneInfo("UTC"),
                first_day=query.first_day,
                last_day=query.last_day,
                now=now,
                limit=1000,
            )
            assert got == want, (raw, by)
            nonempty += bool(want)
    assert nonempty > 20


def range_answers(
    client,
    project_id: str,
    events: list[ref.Ev],
    zone: ZoneInfo,
    first: date,
    last: date,
    raw: list,
    now: datetime,
) -> tuple[dict, dict]:
    """The dashboard the query layer gives for the local days first..last under the filters
    ``raw`` (JSON form), and the reference model's."""
    query = Query(
        project_id,
        (last - first).days + 1,
        now,
        tz=zone.key,
        filters=parse_filters(json.dumps(raw)),
        first=first,
        last=last,
    )
    want = ref.dashboard(
        events, as_tuple(raw) if raw else [], zone=zone, first_day=first, last_day=last, now=now
    )
    return got_dashboard(client, query), want


def test_a_zone_and_a_from_to_range(client, site):
    project_id, now, events = site
    zone = ZoneInfo("America/New_York")
    last = now.astimezone(zone).date() - timedelta(days=2)
    first = last - timedelta(days=4)
    for raw in ([], [["contains", "path", ["blog"]], ["is_not", "exitPage", ["/"]]]):
        filters = parse_filters(json.dumps(raw))
        days = (last - first).days + 1
        query = Query(project_id, days, now, tz=zone.key, filters=filters, first=first, last=last)
        want = ref.dashboard(
            events, as_tuple(raw) if raw else [], zone=zone, first_day=first, last_day=last, now=now
        )
        check_dashboard(got_dashboard(client, query), want)


def test_the_first_local_day_of_1970_east_of_utc_counts_each_event_once(client):
    # Local 1970-01-01 in Berlin (and east of it) starts before the Date type's first day, so
    # it holds no whole UTC day: the empty day range 1970-01-01..1969-12-31 was read as
    # 1970-01-01..1970-01-01 and that UTC day's rollup rows were added to the raw edge (sessions
    # 4 for 3, every top list 9 for 4).
    project_id, _ = new_project(client, user="epoch")
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    events = [
        ref.Ev("pageview", epoch + timedelta(seconds=s), path="/e", session_id=sid, visitor_id=v)
        for s, sid, v in (
            (0, "s1", "v1"),
            (1, "s1", "v1"),
            (39_599, "s2", "v2"),
            (39_600, "s3", "v3"),
            (86_399, "s4", "v4"),
        )
    ]
    store(client, project_id, sent(events))
    now = datetime.now(UTC).replace(microsecond=0)
    for tz in ("Europe/Berlin", "Asia/Kathmandu", "UTC", "America/New_York"):
        zone = ZoneInfo(tz)
        for first, last in ((date(1970, 1, 1),) * 2, (date(1970, 1, 1), date(1970, 1, 2))):
            for raw in ([], [["is", "path", ["/e"]]]):
                got, want = range_answers(client, project_id, events, zone, first, last, raw, now)
                assert want["summary"]["totalEvents"] >= 1, (tz, first, last)
                check_dashboard(got, want)


def test_a_range_longer_than_the_days_limit_counts_every_day(client):
    # from/to ranges reach 366 days, days only 90: the unfiltered (rollup) path kept 90 of the
    # timeline's days (and of the totals), the filtered path all of them.
    project_id, _ = new_project(client, user="long-range")
    now = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=2)
    start = now - timedelta(days=300)
    events = [
        ref.Ev(
            "pageview" if n % 3 else "signup",
            start + timedelta(days=n, hours=(n * 7) % 24),
            path="/" if n % 3 else "",
            session_id=f"s{n}",
            visitor_id=f"v{n % 40}",
        )
        for n in range(300)
    ]
    store(client, project_id, sent(events))
    for zone in (ZoneInfo("UTC"), ZoneInfo("America/New_York")):
        last = now.astimezone(zone).date() - timedelta(days=1)
        first = last - timedelta(days=365)  # 366 days
        for raw in ([], [["contains", "event", ["e"]]]):
            got, want = range_answers(client, project_id, events, zone, first, last, raw, now)
            assert want["summary"]["totalEvents"] >= 199
            check_dashboard(got, want)


def _url(project_id: str, **params: str) -> str:
    return f"?projectId={project_id}" + "".join(f"&{k}={quote(v)}" for k, v in params.items())


def test_over_http_with_range_filters_and_comparison(client, site):
    project_id, now, events = site
    utc = ZoneInfo("UTC")
    last = now.date() - timedelta(days=1)
    first = last - timedelta(days=2)
    raw = [["contains", "path", ["blog"]]]
    for compare in ("previous_period", "previous_year"):
        q = _url(
            project_id,
            **{"from": first.isoformat(), "to": last.isoformat()},
            filters=json.dumps(raw),
            compare=compare,
        )
        response = client.get(f"/api/dashboard{q}", headers=auth("alice"))
        assert response.status_code == 200, response.text
        body = response.json()
        want = ref.with_comparison(
            events,
            as_tuple(raw),
            compare=compare,
            zone=utc,
            first_day=first,
            last_day=last,
            now=datetime.now(UTC),
        )
        assert body["summary"] == want["summary"]
        assert body["timeline"] == want["timeline"]
        assert body["comparison"] == want["comparison"]
        response = client.get(f"/api/breakdown{q}&by=source&limit=5", headers=auth("alice"))
        assert response.status_code == 200, response.text
        want_rows = ref.breakdown_with_comparison(
            events,
            "source",
            as_tuple(raw),
            compare=compare,
            zone=utc,
            first_day=first,
            last_day=last,
            limit=5,
        )
        assert response.json() == {"by": "source", "rows": want_rows}
    plain = client.get(f"/api/dashboard?projectId={project_id}", headers=auth("alice")).json()
    assert "comparison" not in plain
    rows = client.get(f"/api/breakdown?projectId={project_id}&by=path", headers=auth("alice"))
    assert all("comparison" not in r for r in rows.json()["rows"])


@pytest.mark.parametrize(
    ("query", "path"),
    [
        ("&filters=nope", "$.filters"),
        ('&filters=[["is","city",["x"]]]', "$.filters[0][1]"),
        ('&filters=[["like","path",["x"]]]', "$.filters[0][0]"),
        ('&filters=[["is","path",[]]]', "$.filters[0][2]"),
        ("&filters=" + json.dumps([["is", "path", ["x" * 2049]]]), "$.filters[0][2][0]"),
        ("&filters=" + json.dumps([["is", "path", ["x"]]] * 21), "$.filters"),
        ("&days=7&from=2026-01-01&to=2026-01-02", "$.days"),
        ("&from=2026-01-03&to=2026-01-02", "$.from"),
        ("&from=2026-01-03", "$.to"),
        ("&from=2025-01-01&to=2026-01-02", "$.to"),
        ("&from=2026-02-30&to=2026-03-02", "$.from"),
    ],
)
def test_malformed_queries_are_400(client, query, path):
    project_id, _ = new_project(client)
    for endpoint in ("/api/dashboard?", "/api/breakdown?by=path&"):
        response = client.get(
            f"{endpoint}projectId={project_id}{quote(query, safe='&=')}", headers=auth("alice")
        )
        assert response.status_code == 400, response.text
        body = response.json()
        assert body["error"] == "Invalid query"
        assert body["details"][0]["path"] == path, body


@pytest.mark.parametrize("query", ["&compare=lastweek", "&days=91", "&from=2026-1-1&to=2026-01-02"])
def test_what_the_schema_refuses_is_400_too(client, query):
    project_id, _ = new_project(client)
    for endpoint in ("/api/dashboard?", "/api/breakdown?by=path&"):
        response = client.get(f"{endpoint}projectId={project_id}{query}", headers=auth("alice"))
        assert response.status_code == 400, response.text
        assert response.json()["error"] == "Invalid query"


def test_from_to_is_a_date_not_an_injection(client, site):
    project_id, _, _ = site
    day = date(2026, 1, 1).isoformat()
    response = client.get(
        f"/api/dashboard{_url(project_id, **{'from': day, 'to': day})}", headers=auth("alice")
    )
    assert response.status_code == 200 and len(response.json()["timeline"]) == 1


# --- POST /api/v2/query ------------------------------------------------------------------------
V2_CASES = [
    (["visitors", "visits", "pageviews", "events", "bounce_rate", "visit_duration"], [], []),
    (["visitors", "pageviews", "bounce_rate", "visit_duration"], ["visit:source"], []),
    (["visitors", "events"], ["event:page", "time:day"], [["contains", "event:page", ["blog"]]]),
    (["visits", "bounce_rate"], ["visit:entry_page"], [["is_not", "country", ["DE"]]]),
    (["pageviews", "visit_duration"], ["time:hour"], [["is", "visit:source", ["日本語"]]]),
    (["visitors"], ["country", "exitPage"], [["contains_not", "utmMedium", ["CPC_"]]]),
]
TALLY_NAMES = {
    "visit:source": "source",
    "event:page": "path",
    "visit:entry_page": "entryPage",
    "country": "country",
    "exitPage": "exitPage",
    "utmMedium": "utmMedium",
}


@pytest.mark.parametrize(("metrics", "dimensions", "filters"), V2_CASES)
def test_v2_query_matches_the_reference(client, site, metrics, dimensions, filters):
    project_id, _, events = site
    last = datetime.now(UTC).date() - timedelta(days=1)
    first = last - timedelta(days=8)
    body = {
        "site_id": project_id,
        "metrics": metrics,
        "date_range": [first.isoformat(), last.isoformat()],
        "dimensions": dimensions,
        "filters": filters,
    }
    response = client.post("/api/v2/query", json=body, headers=auth("alice"))
    assert response.status_code == 200, response.text
    answer = response.json()
    got = {tuple(r["dimensions"]): r["metrics"] for r in answer["results"]}
    want = ref.v2_rows(
        events,
        metrics,
        [TALLY_NAMES.get(d, d) for d in dimensions],
        [(op, TALLY_NAMES.get(dim, dim), tuple(v)) for op, dim, v in filters],
        zone=ZoneInfo("UTC"),
        first_day=first,
        last_day=last,
    )
    assert got == want
    assert want  # not vacuous
    assert answer["meta"] == {"timezone": "UTC"}
    if not dimensions:
        return
    order = [r["metrics"][0] for r in answer["results"]]
    if "time:day" in dimensions or "time:hour" in dimensions:
        return
    assert order == sorted(order, reverse=True)


def test_v2_query_paginates_and_refuses_what_it_does_not_support(client, site):
    project_id, _, _ = site
    body = {"site_id": project_id, "metrics": ["visitors"], "date_range": "30d"}
    everything = client.post(
        "/api/v2/query", json={**body, "dimensions": ["event:page"]}, headers=auth("alice")
    ).json()["results"]
    page = client.post(
        "/api/v2/query",
        json={**body, "dimensions": ["event:page"], "pagination": {"limit": 2, "offset": 1}},
        headers=auth("alice"),
    ).json()["results"]
    assert page == everything[1:3]
    bad = client.post(
        "/api/v2/query", json={**body, "metrics": ["views_per_visit"]}, headers=auth("alice")
    )
    assert bad.status_code == 400 and bad.json()["error"] == "Invalid payload"
    assert bad.json()["details"][0]["path"] == "$.metrics[0]"
    other = client.post("/api/v2/query", json=body, headers=auth("eve"))
    assert other.status_code == 404


@pytest.mark.parametrize(
    ("zone", "day"),
    [
        ("Pacific/Chatham", date(2025, 9, 28)),  # 02:45 +12:45 -> 03:45 +13:45
        ("Australia/Lord_Howe", date(2025, 4, 6)),  # 02:00 +11 -> 01:30 +10:30
        ("Australia/Lord_Howe", date(2025, 10, 5)),  # 02:00 +10:30 -> 02:30 +11
        ("America/New_York", date(2025, 11, 2)),  # 01:00-02:00 twice
    ],
)
def test_v2_hours_are_local_across_a_dst_change_of_any_size(client, user, zone, day):
    # ClickHouse's toStartOfHour put a Chatham or Lord Howe time after a change that moves
    # the clock by 30 or 60 minutes off the whole hour in the hour before.
    project_id, _ = new_project(client, user=user)
    response = client.patch(
        "/api/projects", json={"projectId": project_id, "timezone": zone}, headers=auth(user)
    )
    assert response.status_code == 200, response.text
    tz = ZoneInfo(zone)
    start = datetime.combine(day, datetime.min.time(), tzinfo=tz).astimezone(UTC)
    events = [
        ref.Ev("pageview", start + timedelta(minutes=20 * n + 5), path="/", visitor_id=f"v{n}")
        for n in range(80)
    ]
    store(client, project_id, sent(events))
    body = {
        "site_id": project_id,
        "metrics": ["pageviews"],
        "date_range": [day.isoformat(), day.isoformat()],
        "dimensions": ["time:hour"],
    }
    response = client.post("/api/v2/query", json=body, headers=auth(user))
    assert response.status_code == 200, response.text
    got = {tuple(r["dimensions"]): r["metrics"] for r in response.json()["results"]}
    want = ref.v2_rows(
        events, ["pageviews"], ["time:hour"], [], zone=tz, first_day=day, last_day=day
    )
    assert got == want
    assert len(want) >= 23

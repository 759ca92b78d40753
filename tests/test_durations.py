"""Stated session durations are summed as decimals (schema 019, query/durations.py): each the
shortest decimal of its double, the number sent when a double holds it.

74.3 + 65.1 + 15.1 is 154.5, a mean of 51.5, rounded half up to 52: the reference model's number
(tests/reference.py reads each durationMs by its decimal form). Summed as doubles it is
154.49999999999997 and the mean was 51. Every path that computes avgSessionDurationMs or
visit_duration is asked: the unfiltered dashboard (day rollups, and in another zone their raw
edges), each filtered dashboard path (event filters: session_days; session
filters: sessions_quarter; both; the raw path), the comparison and the v2 query."""

from __future__ import annotations

import json
import random
import struct
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from urllib.parse import quote
from zoneinfo import ZoneInfo

import pytest

import reference_filters as ref
from conftest import auth
from reference import Sent, dashboard
from tally.domain.metrics import mean_ms, stated_total
from tally.query import Query, durations
from tally.storage import dashboard as runner
from test_dashboard import send
from test_filters_wired import got_dashboard

SCHEMA = Path(__file__).resolve().parents[1] / "schema" / "019_exact_durations.sql"

# Session s1 ends three times on one day (a tab hidden, shown, hidden), s2 once. Decimals: 154.5
# for s1 (mean 51.5: 52), 158 in all (mean 39.5: 40). Doubles: 51 and 39.
S1 = (74.3, 65.1, 15.1)
S2 = 3.5


def _events(now: datetime) -> list[ref.Ev]:
    at = now - timedelta(minutes=30)
    out = [ref.Ev("pageview", at, path="/a", session_id="s1", visitor_id="v1")]
    for i, duration in enumerate(S1):
        out.append(
            ref.Ev(
                "session_end",
                at + timedelta(seconds=i + 1),
                path="/a",
                session_id="s1",
                visitor_id="v1",
                duration_ms=duration,
            )
        )
    out.append(ref.Ev("pageview", at, path="/b", session_id="s2", visitor_id="v2"))
    out.append(
        ref.Ev(
            "session_end",
            at + timedelta(seconds=5),
            path="/b",
            session_id="s2",
            visitor_id="v2",
            duration_ms=S2,
        )
    )
    return out


def _sent(events: list[ref.Ev]) -> list[Sent]:
    meta = lambda e: {} if e.duration_ms is None else {"durationMs": e.duration_ms}  # noqa: E731
    return [
        Sent(e.name, e.occurred_at, e.path, "", e.session_id, e.visitor_id, metadata=meta(e))
        for e in events
    ]


@pytest.fixture(scope="module")
def site(client):
    """A project in Kathmandu (its days are not UTC days: the raw edges are read) and one in
    UTC, each with the same events sent through POST /api/collect."""
    now = datetime.now(UTC).replace(microsecond=0)
    events = _events(now)
    projects = {}
    for zone in ("UTC", "Asia/Kathmandu"):
        body = {"name": f"durations {zone}", "timezone": zone}
        response = client.post("/api/projects", json=body, headers=auth("dur"))
        assert response.status_code == 201, response.text
        created = response.json()
        send(client, created["apiKey"], _sent(events))
        projects[zone] = created["projectId"]
    return projects, now, events


def test_the_decimals_are_what_the_reference_model_counts():
    # The premise: doubles give the other number.
    assert sum(S1) / 3 < 51.5 and (sum(S1) + S2) / 4 < 39.5
    assert mean_ms(sum(Decimal(str(d)) for d in S1), 3) == 52
    assert mean_ms(sum(Decimal(str(d)) for d in (*S1, S2)), 4) == 40


def _dashboard(client, project_id: str, **params: str) -> dict:
    query = "&".join(f"{k}={quote(v)}" for k, v in {"projectId": project_id, **params}.items())
    response = client.get(f"/api/dashboard?{query}", headers=auth("dur"))
    assert response.status_code == 200, response.text
    return response.json()


FILTERS = {
    "event filter (session_days)": ([["is", "path", ["/a"]]], 52),
    "session filter (sessions_quarter)": ([["is", "entryPage", ["/a"]]], 52),
    "both (sessions_quarter by the kept keys)": (
        [["is_not", "exitPage", ["/b"]], ["contains", "path", ["a"]]],
        52,
    ),
    "a filter keeping both sessions": ([["contains", "path", ["/"]]], 40),
}


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kathmandu"])
def test_every_dashboard_path_sums_the_decimals(client, site, zone):
    projects, now, events = site
    project_id = projects[zone]
    local = ZoneInfo(zone)
    day = now.astimezone(local).date()
    summary = _dashboard(client, project_id, days="2")["summary"]
    assert summary["avgSessionDurationMs"] == 40
    for name, (filters, want) in FILTERS.items():
        got = _dashboard(client, project_id, days="2", filters=json.dumps(filters))["summary"]
        model = ref.dashboard(
            events,
            [(op, dim, values) for op, dim, values in filters],
            zone=local,
            first_day=day - timedelta(days=1),
            last_day=day,
            now=now,
        )
        assert model["summary"]["avgSessionDurationMs"] == want, name
        assert got["avgSessionDurationMs"] == want, name
    # A closed from/to range: a partial last UTC day too, outside UTC.
    fixed = {"from": (day - timedelta(days=1)).isoformat(), "to": day.isoformat()}
    assert _dashboard(client, project_id, **fixed)["summary"]["avgSessionDurationMs"] == 40


def test_the_raw_path_and_the_rollups_agree(client, site):
    """The filtered dashboard's raw path (every session grouped from the raw events) gives what
    the rollup paths give, for each filter."""
    projects, now, _ = site
    from tally.domain.filters import parse_filters
    from tally.query import filtered

    storage = client.app.state.storage
    for filters, want in FILTERS.values():
        query = Query(projects["UTC"], 2, now, filters=parse_filters(json.dumps(filters)))
        assert got_dashboard(client, query)["summary"]["avgSessionDurationMs"] == want
        sql = filtered.dashboard_sql(query, rollup=False)["sessions"]
        rows = storage.query(sql.replace("{db}", storage.database), filtered.parameters(query))
        ends, stated, unstated = rows[0][3], rows[0][4], rows[0][5]
        assert mean_ms(stated_total(stated) + int(unstated), int(ends)) == want
    rows = runner.rendered(Query(projects["UTC"], 2, now), storage.database)
    assert "session_days" in rows["session_ends"]


def test_comparison_and_v2_query_sum_the_decimals(client, site):
    projects, now, events = site
    project_id = projects["UTC"]
    compared = _dashboard(client, project_id, days="2", compare="previous_period")
    assert compared["summary"]["avgSessionDurationMs"] == 40
    assert compared["comparison"]["summary"]["avgSessionDurationMs"] == 0
    days = [(now - timedelta(days=1)).date().isoformat(), now.date().isoformat()]
    for filters, want in ([], 40), ([["is", "event:page", ["/a"]]], 52):
        body = {
            "site_id": project_id,
            "metrics": ["visit_duration"],
            "date_range": days,
            "filters": filters,
        }
        response = client.post("/api/v2/query", json=body, headers=auth("dur"))
        assert response.status_code == 200, response.text
        assert response.json()["results"][0]["metrics"] == [want], filters
    # Grouped by entry page and ordered by visit_duration: fractional sums are ordered exactly
    # (in Python, from the exact sums), /a (52) before /b (4: 3.5 rounded half up).
    body = {
        "site_id": project_id,
        "metrics": ["visit_duration"],
        "date_range": days,
        "dimensions": ["visit:entry_page"],
        "order_by": [["visit_duration", "desc"]],
    }
    response = client.post("/api/v2/query", json=body, headers=auth("dur"))
    assert response.status_code == 200, response.text
    rows = [(r["dimensions"], r["metrics"]) for r in response.json()["results"]]
    assert rows == [(["/a"], [52]), (["/b"], [4])]
    assert dashboard(_sent(events), now, 2)["summary"]["avgSessionDurationMs"] == 40


def _doubles(seed: int) -> list[float]:
    """Doubles >= 0 of every kind: any bit pattern, round decimals, integers, tiny and huge."""
    rng = random.Random(seed)
    out = [0.0, -0.0, 74.3, 1e29, 5e-324, 1.7976931348623157e308, 0.1, 1e16, 1e22, 1e-7, 2.5]
    out += [120.0, 123456789012345680.0, 12345.600000000093, 0.30000000000000004]
    while len(out) < 4000:
        bits = rng.getrandbits(64) & ~(1 << 63)  # sign bit off
        value = struct.unpack("<d", struct.pack("<Q", bits))[0]
        if value == value and value != float("inf"):
            out.append(value)
        out.append(round(rng.random() * 10 ** rng.randint(0, 9), rng.randint(0, 6)))
        out.append(float(rng.randint(0, 10 ** rng.randint(1, 22))))
    return out


def test_the_engine_splits_every_double_into_its_decimal_parts(client):
    """digits * 10^exponent is the double's shortest decimal (Python's repr) exactly, with no
    trailing zeros in digits; the stored columns use the same SQL (schema 019)."""
    storage = client.app.state.storage
    values = _doubles(seed=19)
    bits = [struct.unpack("<Q", struct.pack("<d", v))[0] for v in values]
    x = "reinterpretAsFloat64(b)"
    rows = storage.query(
        f"SELECT b, {durations.digits_sql(x)}, {durations.exponent_sql(x)} "
        "FROM (SELECT arrayJoin({bits:Array(UInt64)}) AS b)",
        {"bits": bits},
    )
    assert len(rows) == len(values)
    for b, digits, exponent in rows:
        value = struct.unpack("<d", struct.pack("<Q", b))[0]
        assert Decimal(digits).scaleb(exponent) == Decimal(repr(abs(value))), value
        assert digits == 0 or digits % 10 != 0, value
        assert digits < 10**17 or digits < 2**64
    schema = SCHEMA.read_text()
    for sql in (durations.digits_sql(durations.STORED), durations.exponent_sql(durations.STORED)):
        assert f" MATERIALIZED {sql} COMMENT " in schema
    # session_days' backfill and view sum them as the queries do
    for sql in (durations.scaled_sum(), durations.outside_pairs()):
        assert schema.count(f"{sql} AS stated_") == 2


def test_sums_past_the_largest_double_count_as_it():
    largest = int(sys.float_info.max)  # the largest double, exactly (even)
    total = stated_total([(292, 2 * 17976931348623157)])  # two of them, as sent
    assert total > largest
    assert mean_ms(total, 1) == largest
    assert mean_ms(total, 2) == largest // 2
    assert mean_ms(stated_total([(-1, 743), (0, 5)]), 2) == 40  # (74.3 + 5) / 2 = 39.65
    assert mean_ms(stated_total([(-1, 5), (-1, 0)]), 1) == 1  # 0.5, half up
    assert mean_ms(stated_total(None), 0) == 0


@pytest.mark.parametrize(
    ("sent", "counted"),
    [
        # An integer a double holds, and the first one it does not: 2^53 + 1 is read as 2^53.
        ("9007199254740992", 9007199254740992),
        ("9007199254740993", 9007199254740992),
        # The double nearest 12345678901234567890, written shortest: 1.2345678901234567e19.
        ("12345678901234567890", 12345678901234567000),
        # More significant digits than a double keeps: read as 2.5, which rounds half up to 3.
        ("2.4999999999999999999", 3),
        ("2.4999999999999", 2),
    ],
)
def test_a_duration_counts_as_the_double_it_is_read_as(client, sent, counted):
    """The README's rule: a durationMs counts as the shortest decimal of the double that JSON
    number is read as, which is the decimal sent for up to 15 significant digits and for every
    integer up to 2^53, and the nearest double's beyond (found by an HTTP hunt: the README
    said "as it was sent" without that bound)."""
    created = client.post(
        "/api/projects", json={"name": f"duration {sent}"}, headers=auth("dur")
    ).json()
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    body = (
        '{"events": [{"name": "pageview", "sessionId": "s", "visitorId": "v", '
        f'"occurredAt": "{at.isoformat()}"}}, {{"name": "session_end", "sessionId": "s", '
        f'"visitorId": "v", "occurredAt": "{(at + timedelta(seconds=1)).isoformat()}", '
        f'"metadata": {{"durationMs": {sent}}}}}]}}'
    )
    response = client.post(
        "/api/collect",
        content=body,
        headers={"x-api-key": created["apiKey"], "content-type": "application/json"},
    )
    assert response.status_code == 202, response.text
    summary = _dashboard(client, created["projectId"], days="1")["summary"]
    assert summary["avgSessionDurationMs"] == counted


def test_upgrade_from_018_sums_the_stored_durations_once(chdb_path):
    """Events stored under schema 018 get their decimal parts (computed on read for the old
    parts) and their rows in session_days from the migration's backfill; events stored after
    come through the view, each once; applying the schema again adds nothing."""
    import asyncio
    import uuid

    from conftest import migrate_before
    from tally.http.views import build_dashboard
    from tally.storage.client import Storage, parse_url
    from tally.storage.migrate import migrate

    storage = Storage(parse_url(f"chdb://{chdb_path}?database=d_{uuid.uuid4().hex[:10]}"), 2)
    db = storage.database
    now = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    insert = (
        f"INSERT INTO {db}.events (project_id, name, occurred_at, received_at, session_id, "
        "duration_ms, is_bot) VALUES "
    )

    def row(name: str, minutes: int, session: str, duration: str, bot: int = 0) -> str:
        at = (now - timedelta(minutes=minutes)).strftime("%Y-%m-%d %H:%M:%S")
        return f"('p', '{name}', '{at}', '{at}', '{session}', {duration}, {bot})"

    try:
        migrate_before(storage, 19)
        storage.command(
            insert
            + ", ".join(
                [
                    row("pageview", 9, "s", "NULL"),
                    row("session_end", 8, "s", "74.3"),
                    row("session_end", 7, "s", "65.1"),
                    row("session_end", 6, "s", "15.1"),
                    row("session_end", 5, "", "2.5"),
                    row("session_end", 4, "t", "NULL"),
                    row("session_end", 3, "b", "1e29", bot=1),
                ]
            )
        )
        assert migrate(storage) == ["019_exact_durations", "020_event_visitors"]

        def totals() -> dict[int, Decimal]:
            """The stated total per bot flag, from session_days' rows (not the projection)."""
            rows = storage.query(
                f"SELECT is_bot, sum(stated_scaled), groupArrayArray(stated_outside) "
                f"FROM {db}.session_days WHERE project_id = 'p' GROUP BY is_bot "
                "SETTINGS optimize_use_projections = 0"
            )
            return {
                bot: Decimal(scaled).scaleb(-durations.SCALE)
                + sum((Decimal(d).scaleb(e) for e, d in outside), Decimal(0))
                for bot, scaled, outside in rows
            }

        assert totals() == {0: Decimal("157.0"), 1: Decimal("1e29")}
        rows = storage.query(
            f"SELECT uniqExact(session_hash, is_bot), sum(ends), sum(ends_stated), sum(pageviews) "
            f"FROM {db}.session_days"
        )
        assert rows == [(4, 6, 5, 1)]  # s, t, b (a bot) and the events without a session
        parts = storage.query(
            f"SELECT duration_digits, duration_exponent FROM {db}.events "
            "WHERE name = 'session_end' ORDER BY occurred_at"
        )
        assert parts == [(743, -1), (651, -1), (151, -1), (25, -1), (0, 0), (1, 29)]

        storage.command(insert + row("session_end", 2, "s", "0.5"))
        assert totals() == {0: Decimal("157.5"), 1: Decimal("1e29")}
        assert migrate(storage) == []
        assert totals() == {0: Decimal("157.5"), 1: Decimal("1e29")}

        # The dashboard: 74.3 + 65.1 + 15.1 + 2.5 + 0.5 and the unstated end (4 minutes after
        # its session's first event... its only event: 0 ms), over 6 ends: 157.5 / 6 = 26.25.
        query = Query("p", 2, datetime.now(UTC))
        got = build_dashboard(asyncio.run(runner.fetch(storage, query)), query)
        assert got.summary.avg_session_duration_ms == 26
    finally:
        storage.close()

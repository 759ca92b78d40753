"""POST /api/collect: credentials, validation at every limit, enrichment, beacons and CORS."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from conftest import new_project, stored
from tally.http.collect_fast import header_text

SAFARI_IPHONE = (
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/17.0 Mobile/15E148 Safari/604.1"
)
CHROME_WINDOWS = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/126.0.0.0 Safari/537.36"
)


@pytest.fixture
def project(client):
    return new_project(client)


def post(client, key, body, **headers):
    if key is not None:
        headers["x-api-key"] = key
    content = body if isinstance(body, bytes | str) else json.dumps(body)
    return client.post(
        "/api/collect", content=content, headers={"content-type": "application/json", **headers}
    )


def count(client, project_id):
    return stored(
        client, "SELECT count() FROM {db}.events WHERE project_id = {p:String}", p=project_id
    )[0][0]


def one(**fields):
    return {"events": [{"name": "pageview", **fields}]}


# --- credentials ------------------------------------------------------------------------------
def test_missing_key(client, project):
    response = post(client, None, one())
    assert response.status_code == 401
    assert response.json() == {"error": "Missing API key"}


def test_empty_key_is_missing(client, project):
    response = post(client, "", one())
    assert (response.status_code, response.json()) == (401, {"error": "Missing API key"})


def test_invalid_key(client, project):
    response = post(client, "tk_not-a-real-key", one())
    assert (response.status_code, response.json()) == (401, {"error": "Invalid API key"})


def test_credentials_are_checked_before_the_body(client, project):
    assert post(client, None, b"{not json").json() == {"error": "Missing API key"}
    assert post(client, "nope", b"{not json").json() == {"error": "Invalid API key"}


def test_query_parameter_key(client, project):
    project_id, key = project
    response = client.post(
        f"/api/collect?apiKey={key}",
        content=json.dumps(one()),
        headers={"content-type": "text/plain"},
    )
    assert response.status_code == 202
    assert count(client, project_id) == 1


def test_header_wins_over_query(client, project):
    project_id, key = project
    ok = client.post(
        "/api/collect?apiKey=wrong",
        content=json.dumps(one()),
        headers={"x-api-key": key, "content-type": "application/json"},
    )
    assert ok.status_code == 202
    bad = client.post(
        f"/api/collect?apiKey={key}",
        content=json.dumps(one()),
        headers={"x-api-key": "wrong", "content-type": "application/json"},
    )
    assert (bad.status_code, bad.json()) == (401, {"error": "Invalid API key"})
    assert count(client, project_id) == 1


def test_key_of_one_project_writes_to_that_project_only(client, project):
    project_id, key = project
    other_id, _ = new_project(client, user="bob")
    assert post(client, key, one()).status_code == 202
    assert count(client, project_id) == 1 and count(client, other_id) == 0


# --- accepted bodies --------------------------------------------------------------------------
def test_text_plain_beacon_body(client, project):
    project_id, key = project
    response = client.post(
        f"/api/collect?apiKey={key}",
        content=json.dumps({"events": [{"name": "session_end", "metadata": {"durationMs": 5}}]}),
        headers={"content-type": "text/plain;charset=UTF-8"},
    )
    assert response.status_code == 202, response.text
    assert response.json() == {"accepted": 1}
    assert count(client, project_id) == 1


def test_cors_preflight_and_response_headers(client):
    preflight = client.options(
        "/api/collect",
        headers={
            "origin": "https://shop.example",
            "access-control-request-method": "POST",
            "access-control-request-headers": "content-type,x-api-key",
        },
    )
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] in ("*", "https://shop.example")
    allowed = preflight.headers["access-control-allow-headers"].lower()
    assert "x-api-key" in allowed and "content-type" in allowed
    response = post(client, None, one(), origin="https://shop.example")
    assert response.headers["access-control-allow-origin"] in ("*", "https://shop.example")


@pytest.mark.parametrize(
    ("method", "headers", "error"),
    [
        ("POST", "content-type,x-custom", "Disallowed CORS headers"),
        ("PUT", "content-type", "Disallowed CORS method"),
    ],
)
def test_a_refused_cors_preflight_answers_in_the_error_shape(client, method, headers, error):
    """Litestar answers preflights itself; a refused one was a text/plain 400."""
    for path in ("/api/collect", "/api/projects"):
        refused = client.options(
            path,
            headers={
                "origin": "https://shop.example",
                "access-control-request-method": method,
                "access-control-request-headers": headers,
            },
        )
        assert refused.status_code == 400
        assert refused.headers["content-type"].startswith("application/json")
        assert refused.json() == {"error": error}
        assert refused.headers["x-content-type-options"] == "nosniff"


def test_full_event_is_stored_as_sent(client, project):
    project_id, key = project
    event = {
        "name": "signup",
        "path": "/pricing?plan=pro",
        "url": "https://shop.example/pricing?plan=pro",
        "referrer": "https://news.example/",
        "sessionId": "s-1",
        "visitorId": "v-1",
        "occurredAt": "2026-01-02T03:04:05.678Z",
        "metadata": {"pageTitle": "Pricing", "viewportWidth": 1280, "plan": None, "pro": True},
    }
    assert post(client, key, {"events": [event]}).status_code == 202
    row = stored(
        client,
        "SELECT name, path, url, referrer, session_id, visitor_id, occurred_at, metadata "
        "FROM {db}.events WHERE project_id = {p:String}",
        p=project_id,
    )[0]
    assert row[:6] == (
        "signup",
        "/pricing?plan=pro",
        "https://shop.example/pricing?plan=pro",
        "https://news.example/",
        "s-1",
        "v-1",
    )
    assert row[6].replace(tzinfo=UTC) == datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    assert json.loads(row[7]) == event["metadata"]


# --- occurredAt -------------------------------------------------------------------------------
def occurred(client, project_id):
    rows = stored(
        client,
        "SELECT occurred_at, received_at FROM {db}.events WHERE project_id = {p:String}",
        p=project_id,
    )
    return [(o.replace(tzinfo=UTC), r.replace(tzinfo=UTC)) for o, r in rows]


def test_occurred_at_without_offset_is_utc_and_offsets_are_honoured(client, project):
    project_id, key = project
    post(
        client,
        key,
        {
            "events": [
                {"name": "a", "occurredAt": "2026-03-01T10:00:00"},
                {"name": "b", "occurredAt": "2026-03-01T12:00:00+02:00"},
            ]
        },
    )
    times = sorted(o for o, _ in occurred(client, project_id))
    assert times == [datetime(2026, 3, 1, 10, tzinfo=UTC)] * 2


def test_occurred_at_milliseconds_are_stored_exactly(client, project):
    """Timestamps travel to ClickHouse as seconds with a millisecond fraction: every millisecond,
    from the epoch's first to year 9999's last, must arrive unchanged."""
    project_id, key = project
    sent = [
        "1970-01-01T00:00:00.000Z",
        "1970-01-01T00:00:00.001Z",
        "1999-12-31T23:59:59.999Z",
        "2024-02-29T12:34:56.007Z",
        "2026-01-02T03:04:05.678+05:30",
    ] + [f"2025-06-0{d}T01:02:03.{ms:03d}Z" for d, ms in ((1, 10), (2, 100), (3, 999), (4, 1))]
    assert (
        post(client, key, {"events": [{"name": "t", "occurredAt": t} for t in sent]}).status_code
        == 202
    )
    millis = stored(
        client,
        "SELECT toUnixTimestamp64Milli(occurred_at) FROM {db}.events WHERE project_id = {p:String}",
        p=project_id,
    )
    expected = [round(datetime.fromisoformat(t).timestamp() * 1000) for t in sent]
    assert sorted(m for (m,) in millis) == sorted(expected)


def test_rfc_3339_forms_of_occurred_at_are_read_to_the_millisecond(client, project):
    """What Go's RFC3339Nano, Java's Instant and RFC 3339 itself write is accepted (a batch with
    one of them was refused whole): nine fractional digits cut to the millisecond, ``t`` and ``z``
    in lower case, a leap second as the last millisecond of its minute. Before 1970 says so."""
    project_id, key = project
    sent = {
        "2026-11-24T10:00:00.123456789Z": "2026-11-24T10:00:00.123Z",
        "2026-11-24T10:00:00.1234567+01:00": "2026-11-24T09:00:00.123Z",
        "2026-11-24t10:00:00z": "2026-11-24T10:00:00.000Z",
        "2016-12-31T23:59:60Z": "2016-12-31T23:59:59.999Z",
        "2016-12-31 23:59:60.5Z": "2016-12-31T23:59:59.999Z",
    }
    response = post(client, key, {"events": [{"name": "t", "occurredAt": t} for t in sent]})
    assert response.status_code == 202, response.text
    millis = stored(
        client,
        "SELECT toUnixTimestamp64Milli(occurred_at) FROM {db}.events WHERE project_id = {p:String}",
        p=project_id,
    )
    expected = [round(datetime.fromisoformat(t).timestamp() * 1000) for t in sent.values()]
    assert sorted(m for (m,) in millis) == sorted(expected)
    for before in ("1969-12-31T23:59:59Z", "0001-01-01T00:00:00Z"):
        response = post(client, key, {"events": [{"name": "t", "occurredAt": before}]})
        assert response.status_code == 400
        assert response.json()["details"][0]["message"] == (
            "must not be before 1970-01-01T00:00:00Z"
        ), before
    for wrong in ("2026-11-24T10:00:61Z", "2026-11-24T10:00:00.1234567890Z", "2026-02-30"):
        response = post(client, key, {"events": [{"name": "t", "occurredAt": wrong}]})
        assert response.status_code == 400, wrong


def test_a_user_agent_is_read_and_stored_up_to_512_characters(client, project):
    """A fresh 60 KB User-Agent per request held the event loop for 0.3 s each (found by
    testing): only its first 512 characters are parsed and stored."""
    project_id, key = project
    agent = "Mozilla/5.0 (X11; Linux x86_64) Chrome/120.0 " + "x" * 60_000
    response = client.post(
        "/api/collect",
        json={"events": [{"name": "ua"}]},
        headers={"x-api-key": key, "user-agent": agent},
    )
    assert response.status_code == 202
    rows = stored(
        client,
        "SELECT user_agent, browser FROM {db}.events WHERE project_id = {p:String}",
        p=project_id,
    )
    assert rows == [(agent[:512], "Chrome")]


@pytest.mark.parametrize("key_in", ["header", "query"])  # the fast path, the Litestar route
def test_a_user_agent_in_utf_8_is_stored_as_written(client, project, key_in):
    """Header bytes reach the application read as Latin-1: a UTF-8 User-Agent was stored
    garbled (CafÃ©; Ã\x96sterreich). Now its text is stored as sent; bytes that are not UTF-8
    are kept as Latin-1 characters."""
    project_id, key = project
    sent = ["MyApp/2.1 (Café; Österreich) 東京", "Plain/1.0"]
    for agent in sent:
        headers = {"content-type": "application/json", "user-agent": agent.encode()}
        if key_in == "header":
            target = "/api/collect"
            headers["x-api-key"] = key.encode()
        else:
            target = f"/api/collect?apiKey={key}"
        response = client.post(target, content=json.dumps(one()), headers=headers)
        assert response.status_code == 202, response.text
    rows = stored(
        client,
        "SELECT user_agent FROM {db}.events WHERE project_id = {p:String} ORDER BY user_agent",
        p=project_id,
    )
    assert [agent for (agent,) in rows] == sorted(sent)
    # Bytes that are not UTF-8 (b"Na\xefve") stay as read, one Latin-1 character per byte.
    assert header_text(b"Na\xefve".decode("latin-1")) == "Naïve"


def test_omitted_occurred_at_is_receipt_time_and_future_is_clamped(client, project):
    project_id, key = project
    before = datetime.now(UTC) - timedelta(seconds=1)
    future = (datetime.now(UTC) + timedelta(days=3)).isoformat()
    post(client, key, {"events": [{"name": "a"}, {"name": "b", "occurredAt": future}]})
    after = datetime.now(UTC) + timedelta(seconds=1)
    for occurred_at, received_at in occurred(client, project_id):
        assert occurred_at == received_at
        assert before <= received_at <= after


# --- enrichment -------------------------------------------------------------------------------
def test_ip_from_forwarded_for_and_user_agent_stored(client, project):
    project_id, key = project
    post(
        client,
        key,
        one(),
        **{"x-forwarded-for": "203.0.113.7, 10.0.0.1", "user-agent": SAFARI_IPHONE},
    )
    row = stored(
        client,
        "SELECT ip, user_agent, browser, os, device_type FROM {db}.events "
        "WHERE project_id = {p:String}",
        p=project_id,
    )[0]
    assert row == ("203.0.113.7", SAFARI_IPHONE, "Mobile Safari", "iOS", "mobile")


def test_peer_address_without_forwarded_for(client, project):
    project_id, key = project
    post(client, key, one())
    assert (
        stored(client, "SELECT ip FROM {db}.events WHERE project_id = {p:String}", p=project_id)[0][
            0
        ]
        == "testclient"
    )


@pytest.mark.parametrize(
    ("forwarded", "ip", "country"),
    [
        ("8.8.8.8:1234", "8.8.8.8", "US"),  # a port after the address is left out
        ("8.8.8.8:1234, 10.0.0.1", "8.8.8.8", "US"),
        ("[2a00:1450:4001:80b::200e]:443", "2a00:1450:4001:80b::200e", "DE"),
        ("[2a00:1450:4001:80b::200e]", "2a00:1450:4001:80b::200e", "DE"),
        ("2a00:1450:4001:80b::200e, 10.0.0.1", "2a00:1450:4001:80b::200e", "DE"),
        # One spelling per address: one visitor was three IPs, and three hashes.
        ("2A00:1450:4001:080B:0000:0000:0000:200E", "2a00:1450:4001:80b::200e", "DE"),
        ("[2A00:1450:4001:80B::200E]:443", "2a00:1450:4001:80b::200e", "DE"),
        ("::ffff:8.8.8.8", "8.8.8.8", "US"),
        ("::FFFF:808:808, 10.0.0.1", "8.8.8.8", "US"),
        # Not an address: the socket peer instead (the test client's is "testclient").
        ("garbage", "testclient", "Unknown"),
        ("unknown, 8.8.8.8", "testclient", "Unknown"),
        (" , 8.8.8.8", "testclient", "Unknown"),
        ("999.1.1.1", "testclient", "Unknown"),
        ("8.8.8.8:http", "testclient", "Unknown"),
        ("[8.8.8.8]:80", "testclient", "Unknown"),
        ("2a00:1450::zz", "testclient", "Unknown"),
        ("<script>", "testclient", "Unknown"),
        # A zone (an interface of the sender's host) is no client's; any text may follow the %.
        ("fe80::1%eth0", "testclient", "Unknown"),
        ("2a00:1450:4001:80b::200e%' OR '1'='1", "testclient", "Unknown"),
        ("[2a00:1450:4001:80b::200e%" + "A" * 5000 + "]:443", "testclient", "Unknown"),
    ],
)
@pytest.mark.parametrize("key_in", ["header", "query"])  # the fast path, the Litestar route
def test_forwarded_for_is_stored_only_when_it_is_an_address(
    client, project, forwarded, ip, country, key_in
):
    project_id, key = project
    headers = {"content-type": "application/json", "x-forwarded-for": forwarded}
    if key_in == "header":
        response = client.post(
            "/api/collect", content=json.dumps(one()), headers=headers | {"x-api-key": key}
        )
    else:
        response = client.post(
            f"/api/collect?apiKey={key}", content=json.dumps(one()), headers=headers
        )
    assert response.status_code == 202, response.text
    row = stored(
        client, "SELECT ip, country FROM {db}.events WHERE project_id = {p:String}", p=project_id
    )
    assert row == [(ip, country)]


def test_metadata_wins_over_user_agent(client, project):
    project_id, key = project
    post(
        client,
        key,
        one(metadata={"browser": "Lynx", "deviceType": "tv"}),
        **{"user-agent": CHROME_WINDOWS},
    )
    row = stored(
        client,
        "SELECT browser, os, device_type FROM {db}.events WHERE project_id = {p:String}",
        p=project_id,
    )[0]
    assert row == ("Lynx", "Windows", "tv")


def test_unknown_user_agent(client, project):
    project_id, key = project
    post(client, key, one(), **{"user-agent": ""})
    row = stored(
        client,
        "SELECT browser, os, device_type FROM {db}.events WHERE project_id = {p:String}",
        p=project_id,
    )[0]
    assert row == ("Unknown", "Unknown", "Unknown")


# --- validation: every limit at and just past its bound --------------------------------------
def events(n, **fields):
    return {"events": [{"name": "e", **fields} for _ in range(n)]}


VALID = [
    pytest.param(events(1), id="1 event"),
    pytest.param(events(100), id="100 events"),
    pytest.param(one(name="x"), id="name 1"),
    pytest.param(one(name="n" * 100), id="name 100"),
    pytest.param(one(path="/" * 2048), id="path 2048"),
    pytest.param(one(url="u" * 4096), id="url 4096"),
    pytest.param(one(referrer="r" * 4096), id="referrer 4096"),
    pytest.param(one(sessionId="s" * 200), id="sessionId 200"),
    pytest.param(one(visitorId="v" * 200), id="visitorId 200"),
    pytest.param(one(metadata={f"k{i}": i for i in range(50)}), id="metadata 50 keys"),
    pytest.param(one(metadata={"k" * 100: 1}), id="metadata key 100"),
    pytest.param(one(metadata={"k": "v" * 1024}), id="metadata value 1024"),
    pytest.param(one(metadata={}), id="metadata empty"),
    pytest.param(one(metadata={"n": None, "b": False, "f": 1.5, "i": -3}), id="metadata types"),
    pytest.param(one(path=None, url=None), id="explicit nulls"),
    pytest.param(one(path="/ünï/çødé/🎉"), id="unicode"),
]

INVALID = [
    pytest.param(events(0), "$.events", id="0 events"),
    pytest.param(events(101), "$.events", id="101 events"),
    pytest.param(one(name=""), "$.events[0].name", id="name 0"),
    pytest.param(one(name="n" * 101), "$.events[0].name", id="name 101"),
    pytest.param({"events": [{}]}, "$.events[0]", id="name missing"),
    pytest.param(one(name=5), "$.events[0].name", id="name wrong type"),
    pytest.param(one(path="/" * 2049), "$.events[0].path", id="path 2049"),
    pytest.param(one(url="u" * 4097), "$.events[0].url", id="url 4097"),
    pytest.param(one(referrer="r" * 4097), "$.events[0].referrer", id="referrer 4097"),
    pytest.param(one(sessionId="s" * 201), "$.events[0].sessionId", id="sessionId 201"),
    pytest.param(one(visitorId="v" * 201), "$.events[0].visitorId", id="visitorId 201"),
    pytest.param(one(visitorId=7), "$.events[0].visitorId", id="visitorId wrong type"),
    pytest.param(one(occurredAt="yesterday"), "$.events[0].occurredAt", id="occurredAt garbage"),
    pytest.param(one(occurredAt=1700000000), "$.events[0].occurredAt", id="occurredAt number"),
    pytest.param(
        one(occurredAt="1969-12-31T23:59:59Z"),
        "$.events[0].occurredAt",
        id="occurredAt before 1970",
    ),
    pytest.param(
        one(metadata={f"k{i}": i for i in range(51)}), "$.events[0].metadata", id="metadata 51 keys"
    ),
    pytest.param(one(metadata={"k" * 101: 1}), "$.events[0].metadata", id="metadata key 101"),
    pytest.param(one(metadata={"": 1}), "$.events[0].metadata", id="metadata key empty"),
    pytest.param(one(metadata={"k": "v" * 1025}), "$.events[0].metadata", id="value 1025"),
    pytest.param(one(metadata={"k": {"nested": 1}}), "$.events[0].metadata", id="value object"),
    pytest.param(one(metadata={"k": [1, 2]}), "$.events[0].metadata", id="value array"),
    pytest.param(one(metadata=[1]), "$.events[0].metadata", id="metadata array"),
    pytest.param(one(extra="field"), "$.events[0]", id="unknown event field"),
    pytest.param({"events": [{"name": "a"}], "more": 1}, "$", id="unknown body field"),
    pytest.param({"events": {"name": "a"}}, "$.events", id="events not a list"),
    pytest.param({}, "$", id="events missing"),
    pytest.param([], "$", id="body is a list"),
]


@pytest.mark.parametrize("body", VALID)
def test_valid_bodies_are_accepted(client, project, body):
    project_id, key = project
    response = post(client, key, body)
    assert response.status_code == 202, response.text
    assert response.json() == {"accepted": len(body["events"])}
    assert count(client, project_id) == len(body["events"])


@pytest.mark.parametrize(("body", "path"), INVALID)
def test_invalid_bodies_are_refused_and_nothing_is_stored(client, project, body, path):
    project_id, key = project
    response = post(client, key, body)
    assert response.status_code == 400, response.text
    payload = response.json()
    assert payload["error"] == "Invalid payload"
    assert payload["details"], payload
    assert all(set(d) == {"path", "message"} for d in payload["details"])
    assert payload["details"][0]["path"].startswith(path), payload
    assert count(client, project_id) == 0


@pytest.mark.parametrize(
    "raw",
    [b"{not json", b"", b"null", b'{"events": [{"name": "a"}]', "\ufeff{}".encode(), b"\xff\xfe"],
)
def test_malformed_bodies(client, project, raw):
    project_id, key = project
    response = post(client, key, raw)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "Invalid payload"
    assert response.json()["details"]
    assert count(client, project_id) == 0


def test_one_bad_event_refuses_the_whole_request(client, project):
    project_id, key = project
    response = post(client, key, {"events": [{"name": "ok"}, {"name": ""}]})
    assert response.status_code == 400
    assert response.json()["details"][0]["path"] == "$.events[1].name"
    assert count(client, project_id) == 0


# Body caps: tests/test_limits.py.


def test_an_event_older_than_the_retention_is_refused_not_acknowledged_and_dropped(make_client):
    """With TALLY_RETENTION_DAYS=7, an event of a UTC day that has already left the retention
    was answered 202 and never stored: ClickHouse's TTL drops such a row as it is written (a
    helper's backfill of 45-day-old events at 30 days' retention). It is refused, named; the
    oldest day kept (today minus 7 days, from its first millisecond) is stored."""
    with make_client(retention_days=7) as client:
        project_id, key = new_project(client)
        today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        oldest = today - timedelta(days=7)
        kept = oldest.isoformat().replace("+00:00", "Z")
        gone = (oldest - timedelta(milliseconds=1)).isoformat(timespec="milliseconds")
        response = post(
            client, key, {"events": [{"name": "t"}, {"name": "old", "occurredAt": gone}]}
        )
        assert response.status_code == 400, response.text
        assert response.json()["details"] == [
            {
                "path": "$.events[1].occurredAt",
                "message": "is older than the 7 days this Tally keeps events "
                "(TALLY_RETENTION_DAYS): it would not be stored",
            }
        ]
        response = post(client, key, {"events": [{"name": "kept", "occurredAt": kept}]})
        assert response.status_code == 202, response.text
        sql = "SELECT name, occurred_at FROM {db}.events WHERE project_id = {p:String}"
        assert stored(client, sql, p=project_id) == [("kept", oldest.replace(tzinfo=None))]

"""No byte sequence makes any endpoint answer 5xx. Every body endpoint gets each hostile body
(built from a body that is otherwise valid for it) and every query of a GET or DELETE endpoint each
hostile query: each is a 400 with the contract's error string and a plain-words detail, and
nothing is stored."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from litestar.exceptions import ValidationException

from conftest import auth, new_project, stored
from tally.http.decoding import _collect_strings, check_body
from tally.http.schemas import collect_decoder

DEEP = b"[" * 10_000 + b"]" * 10_000
LONG_NUMBER = b"9" * 10_000


def body_cases(valid: bytes, value: bytes) -> dict[str, tuple[bytes, str | None]]:
    """Hostile variants of ``valid``, whose string value ``value`` (quoted) is the one mutated."""
    quoted = b'"' + value + b'"'

    def swap(replacement: bytes) -> bytes:
        assert quoted in valid
        return valid.replace(quoted, replacement, 1)

    json = "application/json"
    return {
        "invalid UTF-8": (swap(b'"/\xff\xfe"'), json),
        "overlong UTF-8": (swap(b'"\xc0\xaf"'), json),
        "UTF-8 encoded surrogate": (swap(b'"\xed\xa0\x80"'), json),
        "lone surrogate escape": (swap(b'"ab\\ud800"'), json),
        "lone low surrogate escape": (swap(b'"ab\\udc00"'), json),
        "byte order mark": (b"\xef\xbb\xbf" + valid, json),
        "UTF-16 body": (valid.decode().encode("utf-16"), json),
        "raw NUL in a string": (swap(b'"a\x00b"'), json),
        "raw NUL before the body": (b"\x00" + valid, json),
        "nested 10,000 deep": (swap(DEEP), json),
        "nested 10,000 deep, whole body": (DEEP, json),
        "objects nested 10,000 deep": (swap(b'{"a":' * 10_000 + b"1" + b"}" * 10_000), json),
        "a 10,000-digit number": (swap(LONG_NUMBER), json),
        "a 10,000-digit exponent": (swap(b"1e" + LONG_NUMBER), json),
        "a 10,000-digit fraction": (swap(b"0." + LONG_NUMBER), json),
        "duplicate keys": (valid[:-1] + b"," + valid[1:], json),
        "truncated": (valid[:-1], json),
        "empty": (b"", json),
        "whitespace only": (b" \n\t ", json),
        "no content type": (valid, None),
        "form content type": (valid, "application/x-www-form-urlencoded"),
        "XML content type": (valid, "application/xml"),
        "random bytes": (bytes(range(256)), json),
    }


@pytest.fixture
def owned(client):
    return new_project(client, user="bytes-owner")


def body_endpoints(project_id: str, key: str) -> dict[str, tuple[str, dict[str, str], bytes]]:
    return {
        "collect": (
            "/api/collect",
            {"x-api-key": key},
            b'{"events":[{"name":"pageview","path":"/p"}]}',
        ),
        "create project": ("/api/projects", auth("bytes-owner"), b'{"name":"Site"}'),
        "create key": (
            "/api/projects/keys",
            auth("bytes-owner"),
            b'{"projectId":"' + project_id.encode() + b'","label":"ci"}',
        ),
        "v2 query": (
            "/api/v2/query",
            auth("bytes-owner"),
            b'{"site_id":"' + project_id.encode() + b'","metrics":["visitors"],'
            b'"date_range":"7d","filters":[["is","event:page",["/p"]]]}',
        ),
    }


VALUES = {"collect": b"/p", "create project": b"Site", "create key": b"ci", "v2 query": b"/p"}


@pytest.mark.parametrize("endpoint", list(VALUES))
def test_every_hostile_body_is_a_400_on_every_body_endpoint(client, owned, endpoint):
    project_id, key = owned
    path, headers, valid = body_endpoints(project_id, key)[endpoint]
    ok = client.post(path, content=valid, headers={**headers, "content-type": "application/json"})
    assert ok.status_code in (200, 201, 202), ok.text  # the base body is valid
    projects_before = len(
        client.get("/api/projects", headers=auth("bytes-owner")).json()["projects"]
    )
    keys_before = len(
        client.get(
            f"/api/projects/keys?projectId={project_id}", headers=auth("bytes-owner")
        ).json()["keys"]
    )
    events_before = count_events(client, project_id)
    for case, (body, content_type) in body_cases(valid, VALUES[endpoint]).items():
        sent = dict(headers)
        if content_type:
            sent["content-type"] = content_type
        response = client.post(path, content=body, headers=sent)
        assert response.status_code == 400, (case, response.status_code, response.text)
        payload = response.json()
        assert payload["error"] == "Invalid payload", (case, payload)
        assert payload["details"] and all(
            d["path"].startswith("$") and d["message"] for d in payload["details"]
        ), (case, payload)
        # Plain words, never a parser's internals.
        assert not any("Expected `" in d["message"] for d in payload["details"]), (case, payload)
    # Nothing was stored by any of them.
    assert count_events(client, project_id) == events_before
    projects_after = client.get("/api/projects", headers=auth("bytes-owner")).json()["projects"]
    assert len(projects_after) == projects_before
    keys_after = client.get(
        f"/api/projects/keys?projectId={project_id}", headers=auth("bytes-owner")
    ).json()["keys"]
    assert len(keys_after) == keys_before


def count_events(client, project_id: str) -> int:
    return stored(
        client, "SELECT count() FROM {db}.events WHERE project_id = {p:String}", p=project_id
    )[0][0]


QUERY_CASES = {
    "invalid UTF-8": "projectId=%ff%fe",
    "UTF-8 encoded surrogate": "projectId=%ed%a0%80",
    "byte order mark": "projectId=%ef%bb%bf{pid}",
    "NUL": "projectId={pid}%00",
    # Python's "$" matches before a last newline: "<id>\n" passed the id pattern, a 404.
    "a trailing newline": "projectId={pid}%0A",
    "a 10,000-digit number": "projectId={pid}&days=" + "9" * 10_000,
    "a negative number": "projectId={pid}&days=-1",
    "duplicate parameter": "projectId={pid}&projectId={pid}",
    "invalid UTF-8 in a name": "projectId={pid}&%ff=1",
    "too long": "projectId=" + "a" * 10_000,
}
QUERY_ENDPOINTS = [
    ("GET", "/api/dashboard", ""),
    ("GET", "/api/projects", ""),
    ("GET", "/api/projects/keys", ""),
    ("DELETE", "/api/projects/keys", "&keyId=000000000000000000000000"),
    ("GET", "/api/health", ""),
    ("POST", "/api/collect", ""),
]


# Where a hostile query is not a 400: parameters an endpoint does not read are ignored, and on
# collect an ``apiKey`` that is no key is a 401 ``Invalid API key`` (the seed's answer for an
# invalid key), whatever its bytes: not UTF-8 or holding a NUL, it is no key either.
NOT_READ = {
    "a 10,000-digit number",
    "a negative number",
    "too long",
    "byte order mark",
    "a trailing newline",
}
NOT_A_KEY = {"invalid UTF-8", "UTF-8 encoded surrogate", "NUL"}


def expected(method: str, path: str, case: str) -> int:
    if path in ("/api/projects", "/api/health") and case in NOT_READ:
        return 200
    if path == "/api/collect" and case in NOT_READ | NOT_A_KEY:
        return 401
    if path == "/api/projects/keys" and case in ("a 10,000-digit number", "a negative number"):
        # `days` is not read there: the keys are listed, the (made-up) key id is not found.
        return 200 if method == "GET" else 404
    return 400


@pytest.mark.parametrize(("method", "path", "extra"), QUERY_ENDPOINTS)
def test_every_hostile_query_is_a_400_on_every_endpoint(client, owned, method, path, extra):
    project_id, _ = owned
    for case, template in QUERY_CASES.items():
        query = template.replace("{pid}", project_id) + extra
        headers = {**auth("bytes-owner"), "content-type": "application/json"}
        if path == "/api/collect":
            query = query.replace("projectId=", "apiKey=")  # the key travels in the query
        response = client.request(
            method,
            f"{path}?{query}",
            headers=headers,
            content=b'{"events":[{"name":"q"}]}' if method == "POST" else None,
        )
        assert response.status_code < 500, (case, response.text)
        want = expected(method, path, case)
        assert response.status_code == want, (case, method, path, response.text)
        if want == 401 and path == "/api/collect":
            assert response.json() == {"error": "Invalid API key"}, (case, response.text)
        if want == 400:
            payload = response.json()
            assert payload["error"] == "Invalid query", (case, payload)
            assert payload["details"] and all(d["message"] for d in payload["details"]), payload
            assert not any("Expected `" in d["message"] for d in payload["details"]), payload
    assert count_events(client, project_id) == 0


def test_an_id_with_a_trailing_newline_is_a_400_wherever_an_id_is_read(client, owned):
    project_id, _ = owned
    headers = auth("bytes-owner")
    for path in (
        "/api/breakdown?by=path&",
        "/api/live?",
        "/api/export?from=2026-01-01&to=2026-01-02&",
        "/api/dashboard?",
    ):
        response = client.get(f"{path}projectId={project_id}%0A", headers=headers)
        assert response.status_code == 400, (path, response.text)
        assert response.json()["error"] == "Invalid query", (path, response.text)
    body = {"site_id": project_id + "\n", "metrics": ["visitors"], "date_range": "7d"}
    response = client.post("/api/v2/query", json=body, headers=headers)
    assert response.status_code == 400, response.text
    patch = {"projectId": project_id + "\n", "name": "x"}
    response = client.patch("/api/projects", json=patch, headers=headers)
    assert response.status_code == 400, response.text


@pytest.mark.parametrize("path", ["/api/dashboard", "/api/breakdown?by=path&"])
def test_filters_nested_deeper_than_the_decoder_follows_are_a_400(client, owned, path):
    project_id, _ = owned
    sep = "" if path.endswith("&") else "?"
    for depth in (900, 10_000):
        nested = "[" * depth + "]" * depth
        response = client.get(
            f"{path}{sep}projectId={project_id}&filters={nested}", headers=auth("bytes-owner")
        )
        assert response.status_code == 400, (depth, response.text)
        assert response.json()["error"] == "Invalid query"
        assert response.json()["details"][0]["path"].startswith("$.filters")


def test_metadata_values_nested_deeper_than_the_decoder_follows_are_a_400(client, owned):
    """A metadata value that is an array or object is refused at its first bracket; naming its
    key reads past it, once per level of nesting. Past the depth that reading follows (about a
    thousand levels; a 2 KB body) that was a RecursionError and a 500. Now the same 400 names
    the metadata (the key when it can be read), whichever way the key is sent."""
    project_id, key = owned
    for depth in (900, 1_000, 10_000):
        for value in (b"[" * depth + b"]" * depth, b'{"b":' * depth + b"1" + b"}" * depth):
            body = (
                b'{"events":[{"name":"ok"},{"name":"x","metadata":{"title":"t","a":'
                + value
                + b"}}]}"
            )
            for path, headers in (
                ("/api/collect", {"x-api-key": key, "content-type": "application/json"}),
                (f"/api/collect?apiKey={key}", {"content-type": "text/plain"}),
            ):
                response = client.post(path, content=body, headers=headers)
                assert response.status_code == 400, (depth, path, response.text)
                payload = response.json()
                assert payload["error"] == "Invalid payload"
                (detail,) = payload["details"]
                assert detail["message"] == (
                    "metadata values must be strings, numbers, booleans or null"
                )
                assert detail["path"] in ("$.events[1].metadata.a", "$.events[1].metadata")
                if depth == 900:
                    assert detail["path"] == "$.events[1].metadata.a"
    assert count_events(client, project_id) == 0


# --- the duplicate-key fast path never lets a duplicate through ------------------------------
text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
scalar = st.one_of(text, st.integers(-(2**53), 2**53), st.booleans(), st.none(), st.floats(0, 1))
events = st.lists(
    st.fixed_dictionaries(
        {"name": text.filter(bool)},
        optional={
            "path": st.one_of(text, st.none()),
            "visitorId": text,
            "metadata": st.dictionaries(text.filter(bool), scalar, max_size=4),
        },
    ),
    min_size=1,
    max_size=5,
)


@given(events=events, spaced=st.booleans(), data=st.data())
@settings(max_examples=300, deadline=None)
def test_duplicate_keys_are_always_found(events, spaced, data):
    separators = (", ", ": ") if spaced else (",", ":")
    raw = json.dumps({"events": events}, separators=separators, ensure_ascii=False)
    body = raw.encode()
    check_body(collect_decoder, body, ["application/json"], _collect_strings)  # accepted
    # Now repeat one key of one object: always refused, fast path or not.
    event = data.draw(st.integers(0, len(events) - 1))
    compact = {"separators": (",", ":"), "ensure_ascii": False}
    first = json.dumps(events[event], **compact)
    key = first[1:].partition(":")[0]  # "name", always first
    doubled = "{" + key + ":" + json.dumps(events[event]["name"], **compact) + "," + first[1:]
    events_text = [json.dumps(e, **compact) for e in events]
    events_text[event] = doubled
    hostile = ('{"events":[' + ",".join(events_text) + "]}").encode()
    with pytest.raises(ValidationException):
        check_body(collect_decoder, hostile, ["application/json"], _collect_strings)


def test_long_numbers_are_refused_and_long_digit_strings_are_not(client, owned):
    """A number is at most MAX_NUMBER_CHARS characters (64-bit integers and doubles need fewer);
    the same digits inside a string are text, and a double written in full is a number."""
    from tally.http.decoding import MAX_NUMBER_CHARS

    _, key = owned
    headers = {"x-api-key": key, "content-type": "application/json"}
    digits = "1" * (MAX_NUMBER_CHARS + 1)

    def send(event: str):
        return client.post("/api/collect", content='{"events":[' + event + "]}", headers=headers)

    refused = send('{"name":"n","metadata":{"x":0.' + digits + "}}")
    assert refused.status_code == 400
    assert refused.json()["error"] == "Invalid payload"
    assert "64-bit integers or doubles" in refused.json()["details"][0]["message"]
    assert send('{"name":"n","path":"/' + digits + '"}').status_code == 202
    assert (
        send('{"name":"n","metadata":{"x":0.30000000000000004,"y":-1.5e-300}}').status_code == 202
    )


DAYS_RULE = "must be a whole number of days from 1 to 90"
ROWS_RULE = "must be a whole number of rows from 1 to 1000"
DATE_RULE = "must be a date as YYYY-MM-DD"


@pytest.mark.parametrize(
    ("param", "key", "message"),
    [
        ("days=1e1", "$.days", DAYS_RULE),
        ("days=1.0", "$.days", DAYS_RULE),
        ("days=1.5", "$.days", DAYS_RULE),
        ("days=%2B7", "$.days", DAYS_RULE),
        ("days=07", "$.days", f"{DAYS_RULE}, written without leading zeros"),
        ("limit=010", "$.limit", f"{ROWS_RULE}, written without leading zeros"),
        ("limit=2.0", "$.limit", ROWS_RULE),
        ("limit=1e1", "$.limit", ROWS_RULE),
        ("limit=1.5", "$.limit", ROWS_RULE),
        ("from=2026-1-1&to=2026-01-02", "$.from", DATE_RULE),
        ("from=2026-11-01T00:00&to=2026-11-02", "$.from", DATE_RULE),
        ("from=2026-11-01&to=2026/11/02", "$.to", DATE_RULE),
    ],
)
def test_numbers_and_dates_in_other_forms_are_refused_with_the_rule(
    client, owned, param, key, message
):
    """``days`` and ``limit`` are whole numbers written in digits (the parameter parser alone
    read 1e1 as 10 and 2.0 as 2); ``from``/``to`` are YYYY-MM-DD, and each says so."""
    project_id, _ = owned
    for path in ("/api/dashboard?", "/api/breakdown?by=path&"):
        if key == "$.limit" and "breakdown" not in path:
            continue
        response = client.get(f"{path}projectId={project_id}&{param}", headers=auth("bytes-owner"))
        assert response.status_code == 400, (path, param, response.text)
        payload = response.json()
        assert payload["error"] == "Invalid query"
        assert {"path": key, "message": message} in payload["details"], (param, payload)
    # Written in digits, the same values are read.
    ok = client.get(
        f"/api/breakdown?by=path&projectId={project_id}&days=10&limit=2",
        headers=auth("bytes-owner"),
    )
    assert ok.status_code == 200, ok.text

"""Every ``details[].message`` says in plain words which rule failed, at the path of the field."""

from __future__ import annotations

import errno
import gzip

import pytest

from conftest import auth, new_project, stored
from tally.domain.projects import CONTROL_RULE, LABEL_RULE, NAME_RULE, VISIBLE_RULE
from tally.http.messages import plain

ISO = "must be an ISO 8601 date-time in its extended form, e.g. 2026-11-23T10:00:00Z"


WITH_SPACES = ", and at most 200 characters with them"


def event(**fields):
    return {"events": [{"name": "pageview", **fields}]}


COLLECT = [
    ({}, "$.events", "is required"),
    ({"events": []}, "$.events", "must have at least 1 event"),
    ({"events": [{"name": "a"}] * 101}, "$.events", "must be at most 100 events"),
    ({"events": "x"}, "$.events", "must be an array, not a string"),
    ({"events": [{}]}, "$.events[0].name", "is required"),
    ({"events": [{"name": ""}]}, "$.events[0].name", "must be 1 to 100 characters"),
    ({"events": [{"name": "n" * 101}]}, "$.events[0].name", "must be 1 to 100 characters"),
    ({"events": [{"name": 1}]}, "$.events[0].name", "must be a string, not an integer"),
    (event(path="p" * 2049), "$.events[0].path", "must be at most 2048 characters"),
    (event(url="u" * 4097), "$.events[0].url", "must be at most 4096 characters"),
    (event(referrer="r" * 4097), "$.events[0].referrer", "must be at most 4096 characters"),
    (event(sessionId="s" * 201), "$.events[0].sessionId", "must be at most 200 characters"),
    (event(visitorId="v" * 201), "$.events[0].visitorId", "must be at most 200 characters"),
    (event(occurredAt="yesterday"), "$.events[0].occurredAt", ISO),
    (
        event(occurredAt="2026-02-30T10:00:00Z"),
        "$.events[0].occurredAt",
        "must be a real ISO 8601 date-time, e.g. 2026-11-23T10:00:00Z",
    ),
    (event(unknown=1), "$.events[0].unknown", "is not a known field"),
    ({"events": [{"name": "a"}], "extra": 1}, "$.extra", "is not a known field"),
    # a name that is not a plain identifier is quoted, as a metadata key is: not read as a path
    ({"events": [{"name": "a"}], "a.b[0]": 1}, '$["a.b[0]"]', "is not a known field"),
    (event(**{"page title": 1}), '$.events[0]["page title"]', "is not a known field"),
    (event(metadata={"k" * 101: 1}), "$.events[0].metadata", "keys must be 1 to 100 characters"),
    (event(metadata={"": 1}), "$.events[0].metadata", "keys must be 1 to 100 characters"),
    # A metadata value is named by its key (msgspec says only "metadata[...]").
    (
        event(metadata={"k": "v" * 1025}),
        "$.events[0].metadata.k",
        "metadata strings must be at most 1024 characters",
    ),
    (
        event(metadata={"pageTitle": "ok", "browser": [1], "os": {}}),
        "$.events[0].metadata.browser",
        "metadata values must be strings, numbers, booleans or null",
    ),
    (
        {"events": [{"name": "a"}, {"name": "b", "metadata": {"ok": 1, "title": "t" * 1025}}]},
        "$.events[1].metadata.title",
        "metadata strings must be at most 1024 characters",
    ),
    (
        event(metadata={'page "title"': None, "plan (2)": {"nested": 1}}),
        '$.events[0].metadata["plan (2)"]',
        "metadata values must be strings, numbers, booleans or null",
    ),
    (
        event(metadata={"ünï": [1]}),
        '$.events[0].metadata["ünï"]',
        "metadata values must be strings, numbers, booleans or null",
    ),
    (
        event(metadata={f"k{i}": 1 for i in range(51)}),
        "$.events[0].metadata",
        "must have at most 50 keys",
    ),
    (event(metadata=[]), "$.events[0].metadata", "must be an object or null, not an array"),
    # a date-time and a newline is no date-time ($ alone would match before the newline)
    (
        event(occurredAt="2026-11-23T10:00:00Z\n"),
        "$.events[0].occurredAt",
        ISO,
    ),
    # ISO 8601's basic form, and offsets of 24 hours or more (the document's pattern admitted
    # those, which were then refused as not real)
    (event(occurredAt="20261123T100000Z"), "$.events[0].occurredAt", ISO),
    (event(occurredAt="2026-11-23T10:00:00+24:00"), "$.events[0].occurredAt", ISO),
    (event(occurredAt="2026-11-23T10:00:00-0960"), "$.events[0].occurredAt", ISO),
]


@pytest.mark.parametrize(("body", "path", "message"), COLLECT)
def test_collect_messages(client, body, path, message):
    _, key = new_project(client, user="messages")
    response = client.post("/api/collect", json=body, headers={"x-api-key": key})
    assert response.status_code == 400
    assert response.json() == {
        "error": "Invalid payload",
        "details": [{"path": path, "message": message}],
    }


BYTES = [
    (b"\xff", "application/json", "is not valid UTF-8"),
    (b'{"events":[{"name":"\\ud800"}]}', "application/json", "is not valid UTF-8: it contains"),
    (b"", "application/json", "a JSON body is required"),
    (b'{"events":', "application/json", "is not valid JSON: it ends too early"),
    (b"{nope}", "application/json", "is not valid JSON (at byte 1)"),
    (
        b'{"events":[{"name":"a","metadata":{"x":NaN}}]}',
        "application/json",
        "is not valid JSON (at byte 39): NaN and Infinity are not numbers in JSON; send null",
    ),
    (
        b'{"events":[{"name":"a","metadata":{"x":-Infinity}}]}',
        "application/json",
        "is not valid JSON (at byte 40): NaN and Infinity are not numbers",
    ),
    (b'{"events":[{"name":"a"}]}', "application/xml", "the content type must be application/json"),
    (b'{"events":[{"name":"a","name":"b"}]}', "application/json", "has the key 'name' twice"),
    (b'\xef\xbb\xbf{"events":[]}', "application/json", "starts with a byte order mark"),
]


@pytest.mark.parametrize("route", ["collect fast path", "collect route", "projects"])
def test_a_compressed_body_is_refused_saying_so(client, route):
    """Bodies are read as sent: a gzip body was refused as "not valid UTF-8", and plain JSON
    labelled gzip was accepted. Any coding but identity is now refused, named."""
    _, key = new_project(client, user="messages")
    plain = b'{"events":[{"name":"a"}]}' if route != "projects" else b'{"name":"Site"}'
    target, headers = {
        "collect fast path": ("/api/collect", {"x-api-key": key}),
        "collect route": (f"/api/collect?apiKey={key}", {}),
        "projects": ("/api/projects", auth("messages")),
    }[route]
    headers = headers | {"content-type": "application/json"}
    for body, coding in ((gzip.compress(plain), "gzip"), (plain, "gzip"), (plain, "Br")):
        response = client.post(target, content=body, headers=headers | {"content-encoding": coding})
        assert response.status_code == 400, response.text
        assert response.json() == {
            "error": "Invalid payload",
            "details": [
                {
                    "path": "$",
                    "message": f"must be sent uncompressed; Content-Encoding {coding.lower()} "
                    "is not accepted",
                }
            ],
        }
    accepted = client.post(
        target, content=plain, headers=headers | {"content-encoding": "identity"}
    )
    assert accepted.status_code in (201, 202), accepted.text


@pytest.mark.parametrize("route", ["collect fast path", "collect route", "projects", "v2"])
def test_repeated_body_headers_are_read_whole(client, route):
    """Two Content-Encoding lines are one list (``identity`` then ``gzip`` is gzip), and two
    Content-Type lines are refused: only the first line of each was read, so a gzip body after
    an identity line was "not valid UTF-8" and application/json then text/html was accepted
    while the other order was refused. Nothing of a refused body is stored."""
    project, key = new_project(client, user="messages")
    plain = {
        "projects": b'{"name":"Site"}',
        "v2": b'{"site_id":"%s","metrics":["visitors"],"date_range":"7d"}' % project.encode(),
    }.get(route, b'{"events":[{"name":"repeated-headers"}]}')
    target, headers = {
        "collect fast path": ("/api/collect", [("x-api-key", key)]),
        "collect route": (f"/api/collect?apiKey={key}", []),
        "projects": ("/api/projects", list(auth("messages").items())),
        "v2": ("/api/v2/query", list(auth("messages").items())),
    }[route]
    json_type = [("content-type", "application/json")]
    cases = [
        (
            gzip.compress(plain),
            [*json_type, ("content-encoding", "identity"), ("content-encoding", "gzip")],
            "must be sent uncompressed; Content-Encoding gzip is not accepted",
        ),
        (
            plain,
            [*json_type, ("content-encoding", "gzip"), ("content-encoding", "identity")],
            "must be sent uncompressed; Content-Encoding gzip is not accepted",
        ),
        (
            plain,
            [*json_type, ("content-type", "text/html")],
            "the Content-Type header is given more than once; send one",
        ),
        (
            plain,
            [("content-type", "text/html"), *json_type],
            "the Content-Type header is given more than once; send one",
        ),
    ]
    for body, lines, message in cases:
        response = client.post(target, content=body, headers=headers + lines)
        assert response.status_code == 400, (lines, response.text)
        assert response.json() == {
            "error": "Invalid payload",
            "details": [{"path": "$", "message": message}],
        }, lines
    if route.startswith("collect"):
        refused = stored(
            client, "SELECT count() FROM {db}.events WHERE project_id = {p:String}", p=project
        )
        assert refused == [(0,)]
    two_identities = [("content-encoding", "identity"), ("content-encoding", "identity")]
    accepted = client.post(target, content=plain, headers=headers + json_type + two_identities)
    assert accepted.status_code in (200, 201, 202), accepted.text


def test_a_metadata_number_out_of_range_names_its_key(client):
    _, key = new_project(client, user="messages")
    raw = b'{"events":[{"name":"a","metadata":{"ok":1,"big":1e400}}]}'
    response = client.post(
        "/api/collect", content=raw, headers={"x-api-key": key, "content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["details"] == [
        {
            "path": "$.events[0].metadata.big",
            "message": "is out of range (numbers must fit a 64-bit integer or a double)",
        }
    ]


@pytest.mark.parametrize(("raw", "content_type", "message"), BYTES)
def test_byte_messages(client, raw, content_type, message):
    _, key = new_project(client, user="messages")
    response = client.post(
        "/api/collect", content=raw, headers={"x-api-key": key, "content-type": content_type}
    )
    assert response.status_code == 400
    [detail] = response.json()["details"]
    assert detail["path"] == "$"
    assert detail["message"].startswith(message), detail


@pytest.mark.parametrize(
    ("body", "path", "message"),
    [
        ({}, "$.name", "is required"),
        ({"name": "a"}, "$.name", NAME_RULE),
        ({"name": "a" * 61}, "$.name", NAME_RULE),
        # read up to 200 characters with the spaces: the message says so
        ({"name": " " * 250 + "ab"}, "$.name", f"{NAME_RULE}{WITH_SPACES}"),
        ({"name": "Sh\x00op"}, "$.name", CONTROL_RULE),
        ({"name": "\u200b\u200b\u200b"}, "$.name", VISIBLE_RULE),
        ({"name": 3}, "$.name", "must be a string, not an integer"),
        ({"name": "ok", "x": 1}, "$.x", "is not a known field"),
        ({"name": "ok", 'x"y': 1}, '$["x\\"y"]', "is not a known field"),
    ],
)
def test_project_messages(client, body, path, message):
    response = client.post("/api/projects", json=body, headers=auth("messages"))
    assert response.status_code == 400
    assert response.json()["details"] == [{"path": path, "message": message}]


@pytest.mark.parametrize(
    ("body", "path", "message"),
    [
        ({}, "$.projectId", "is required"),
        ({"projectId": "x"}, "$.projectId", "must be a 24-character id (lowercase hex digits)"),
        ({"label": ""}, "$.label", LABEL_RULE),
        ({"label": "   "}, "$.label", LABEL_RULE),
        ({"label": "l" * 61}, "$.label", LABEL_RULE),
        ({"label": "l" * 201}, "$.label", f"{LABEL_RULE}{WITH_SPACES}"),
        ({"label": "C\x00I"}, "$.label", CONTROL_RULE),
        ({"label": "\u200b"}, "$.label", VISIBLE_RULE),
    ],
)
def test_key_messages(client, body, path, message):
    project_id, _ = new_project(client, user="messages")
    body = {"projectId": project_id, **body} if "projectId" not in body and body else body
    response = client.post("/api/projects/keys", json=body, headers=auth("messages"))
    assert response.status_code == 400
    assert response.json()["details"] == [{"path": path, "message": message}]


DAYS = "must be a whole number of days from 1 to 90"


@pytest.mark.parametrize(
    ("query", "path", "message"),
    [
        ("", "$.projectId", "is required"),
        ("projectId=x", "$.projectId", "must be a 24-character id (lowercase hex digits)"),
        ("projectId={p}&days=0", "$.days", DAYS),
        ("projectId={p}&days=91", "$.days", DAYS),
        ("projectId={p}&days=x", "$.days", DAYS),
        ("projectId={p}&days=1.5", "$.days", DAYS),
        ("projectId={p}&days=" + "9" * 100, "$.days", DAYS),
        ("projectId={p}&projectId={p}", "$.projectId", "is given more than once"),
        ("projectId=%ff", "$.projectId", "is not valid UTF-8"),
        ("projectId={p}%00", "$.projectId", "must not contain NUL characters"),
        # a value with an apostrophe is quoted otherwise by the decoder: the same words
        ("projectId={p}&compare=x'", "$.compare", "must be one of previous_period, previous_year"),
    ],
)
def test_query_messages(client, query, path, message):
    project_id, _ = new_project(client, user="messages")
    response = client.get(
        "/api/dashboard?" + query.replace("{p}", project_id), headers=auth("messages")
    )
    assert response.status_code == 400
    assert response.json() == {
        "error": "Invalid query",
        "details": [{"path": path, "message": message}],
    }


def test_missing_key_id_on_revoke(client):
    project_id, _ = new_project(client, user="messages")
    response = client.delete(f"/api/projects/keys?projectId={project_id}", headers=auth("messages"))
    assert response.json()["details"] == [{"path": "$.keyId", "message": "is required"}]


@pytest.mark.parametrize(
    ("body", "path", "message"),
    [
        # Plausible's users write the site's domain: the message says what Tally takes instead
        (
            {"site_id": "shop.example.com", "metrics": ["visitors"], "date_range": "7d"},
            "$.site_id",
            "must be a 24-character id (lowercase hex digits): the projectId of a project",
        ),
        ({"metrics": ["visitors"], "date_range": "7d"}, "$.site_id", "is required"),
        (
            {"site_id": "0" * 24, "metrics": "visitors", "date_range": "7d"},
            "$.metrics",
            "must be an array, not a string",
        ),
        (
            {"site_id": "0" * 24, "metrics": ["visitors"], "date_range": "7d", "x": 1},
            "$.x",
            "is not supported",
        ),
        (
            {"site_id": "0" * 24, "metrics": ["visitors"], "date_range": "7d", "a.b": 1},
            '$["a.b"]',
            "is not supported",
        ),
        (
            {
                "site_id": "0" * 24,
                "metrics": ["visitors"],
                "date_range": "7d",
                "include": {"time labels": True},
            },
            '$.include["time labels"]',
            "is not an include option (Plausible's: imports, imports_meta, time_labels, "
            "total_rows, comparisons)",
        ),
        # "must have at least 1 items" before: the items named, in the right number
        (
            {"site_id": "0" * 24, "metrics": [], "date_range": "7d"},
            "$.metrics",
            "must have at least 1 metric",
        ),
        (
            {"site_id": "0" * 24, "metrics": ["visitors"] * 7, "date_range": "7d"},
            "$.metrics",
            "must have at most 6 metrics",
        ),
        (
            {
                "site_id": "0" * 24,
                "metrics": ["visitors"],
                "date_range": "7d",
                "dimensions": ["event:page"] * 5,
            },
            "$.dimensions",
            "must have at most 4 dimensions",
        ),
    ],
)
def test_v2_query_messages(client, body, path, message):
    response = client.post("/api/v2/query", json=body, headers=auth("messages"))
    assert response.status_code == 400, response.text
    assert response.json() == {
        "error": "Invalid payload",
        "details": [{"path": path, "message": message}],
    }


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        (b'{"site_id":1e400,"metrics":["visitors"],"date_range":"7d"}', "$.site_id"),
        (
            b'{"site_id":"000000000000000000000000","metrics":["visitors"],"date_range":"7d",'
            b'"pagination":{"limit":1e400}}',
            "$.pagination.limit",
        ),
        (
            b'{"site_id":"000000000000000000000000","metrics":["visitors"],"date_range":"7d",'
            b'"filters":[["is","event:page",[1,-1e999]]]}',
            "$.filters[0][2][1]",
        ),
        # An integer too long for Python's own parser (over 4,300 digits) is named too.
        (
            b'{"site_id":"000000000000000000000000","metrics":["visitors"],"date_range":"7d",'
            b'"pagination":{"limit":1' + b"0" * 5000 + b"}}",
            "$.pagination.limit",
        ),
    ],
)
def test_a_v2_number_out_of_range_is_named_by_its_path(client, raw, path):
    """v2's body is checked before its shape is known: msgspec named every key of the path
    ``[...]`` (``$[...][...]``); the number's own path is found in the body."""
    response = client.post(
        "/api/v2/query",
        content=raw,
        headers=auth("messages") | {"content-type": "application/json"},
    )
    assert response.status_code == 400, response.text
    assert response.json()["details"] == [
        {"path": path, "message": "is out of range (numbers must fit a 64-bit integer or a double)"}
    ]


def test_a_compressed_v2_query_is_refused_saying_so(client):
    plain_body = b'{"site_id":"000000000000000000000000","metrics":["visitors"],"date_range":"7d"}'
    response = client.post(
        "/api/v2/query",
        content=gzip.compress(plain_body),
        headers=auth("messages") | {"content-type": "application/json", "content-encoding": "gzip"},
    )
    assert response.status_code == 400, response.text
    assert response.json()["details"][0]["message"] == (
        "must be sent uncompressed; Content-Encoding gzip is not accepted"
    )


def test_array_and_object_lengths_are_said_in_the_right_number():
    """Any other body's array or object with a length rule: items or keys, singular for 1."""
    assert plain("Expected `array` of length >= 1", "$.things") == (
        "$.things",
        "must have at least 1 item",
    )
    assert plain("Expected `array` of length <= 3", "$.things") == (
        "$.things",
        "must have at most 3 items",
    )
    assert plain("Expected `object` of length <= 1", "$.extra")[1] == "must have at most 1 key"
    assert plain("Expected `object` of length <= 2", "$.extra")[1] == "must have at most 2 keys"


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (MemoryError(), 503),
        (RuntimeError("can't start new thread"), 503),
        (OSError(errno.EMFILE, "Too many open files"), 503),
        (OSError(errno.ENFILE, "File table overflow"), 503),
        (OSError(errno.ENOMEM, "Cannot allocate memory"), 503),
        (RuntimeError("something else"), 500),
        (OSError(errno.EACCES, "Permission denied"), 500),
        (TimeoutError(), 500),
    ],
)
def test_a_process_out_of_resources_answers_503_and_anything_else_500(exc, status):
    """Out of memory, threads or file descriptors is the server's state, not a fault in the
    request: 503 with Retry-After, in the contract's words (tests/faults/test_resources.py
    makes it happen in a running server). Anything else stays a 500."""
    from tally.http.errors import EXCEPTION_HANDLERS

    handler = next(EXCEPTION_HANDLERS[k] for k in type(exc).__mro__ if k in EXCEPTION_HANDLERS)
    response = handler(None, exc)
    assert response.status_code == status
    if status == 503:
        assert response.content.error == "Storage unavailable"
        assert response.headers["Retry-After"] == "2"
    else:
        assert response.content.error == "Internal server error"

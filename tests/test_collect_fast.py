"""The collect fast path (http/collect_fast.py) answers exactly as the Litestar route does: the same
requests through both give the same status, headers and body, and the same rows."""

from __future__ import annotations

import json

import pytest

from conftest import new_project, stored

CHROME = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/126.0.0.0 Safari/537.36"
)


def one(**fields):
    return json.dumps({"events": [{"name": "pageview", **fields}]})


def cases(key: str) -> list[tuple[str, bytes | str, dict[str, str], bool]]:
    """(name, body, headers, answered by the fast path)."""
    jh = {"content-type": "application/json", "x-api-key": key}
    return [
        ("single", one(path="/a", visitorId="v1"), jh, True),
        (
            "batch with a browser",
            json.dumps({"events": [{"name": "pageview", "path": f"/{i}"} for i in range(100)]}),
            {**jh, "user-agent": CHROME, "x-forwarded-for": "81.2.69.142, 10.0.0.1"},
            True,
        ),
        ("cross-origin beacon", one(), {**jh, "origin": "https://site.example"}, True),
        ("text/plain", one(), {**jh, "content-type": "text/plain;charset=UTF-8"}, True),
        ("no key", one(), {"content-type": "application/json"}, True),
        ("empty key", one(), {**jh, "x-api-key": ""}, True),
        ("unknown key", one(), {**jh, "x-api-key": "tk_not-a-real-key"}, False),
        ("key in the query", one(), {"content-type": "application/json"}, False),
        (
            "form content type",
            one(),
            {**jh, "content-type": "application/x-www-form-urlencoded"},
            True,
        ),
        ("no content type", one(), {"x-api-key": key}, True),
        ("empty body", b"", jh, True),
        ("not JSON", b"{events:", jh, True),
        ("byte order mark", b"\xef\xbb\xbf" + one().encode(), jh, True),
        ("not UTF-8", b'{"events":[{"name":"pa\xffge"}]}', jh, True),
        ("lone surrogate", b'{"events":[{"name":"\\ud800"}]}', jh, True),
        ("duplicate key", b'{"events":[{"name":"a","name":"b"}]}', jh, True),
        ("long number", b'{"events":[{"name":"a","metadata":{"n":' + b"1" * 80 + b"}}]}", jh, True),
        ("unknown field", one(colour="red"), jh, True),
        ("name too long", json.dumps({"events": [{"name": "x" * 101}]}), jh, True),
        ("no events", json.dumps({"events": []}), jh, True),
        ("impossible date", one(occurredAt="2026-02-30T10:00:00Z"), jh, True),
        ("before 1970", one(occurredAt="1969-12-31T23:59:59Z"), jh, True),
    ]


@pytest.mark.parametrize("index", range(len(cases(""))))
def test_fast_path_answers_as_the_route_does(client, index):
    project_id, key = new_project(client)
    name, body, headers, fast = cases(key)[index]
    fast_path = client.app.state.collect_fast
    url = "/api/collect" + (f"?apiKey={key}" if name == "key in the query" else "")
    answers = []
    for enabled in (True, False):
        fast_path.enabled = enabled
        before = fast_path.answered
        try:
            response = client.post(url, content=body, headers=headers)
        finally:
            fast_path.enabled = True
        assert (fast_path.answered - before == 1) == (enabled and fast), name
        answers.append(
            (response.status_code, sorted(response.headers.multi_items()), response.content)
        )
    assert answers[0] == answers[1], name
    if answers[0][0] == 202:
        rows = stored(
            client,
            "SELECT name, path, browser, device_type, country, ip, user_agent, source, channel "
            "FROM {db}.events WHERE project_id = {p:String} ORDER BY path",
            p=project_id,
        )
        half = len(rows) // 2
        assert len(rows) == 2 * half and rows[0::2] == rows[1::2]  # the same row, twice


def test_cap_declared_and_streamed(client):
    """Over the cap: 413 from both, whether the length is declared or not."""
    _, key = new_project(client)
    fast_path = client.app.state.collect_fast
    cap = client.app.state.settings.max_body_bytes
    body = b'{"events":[{"name":"' + b"a" * cap + b'"}]}'
    answers = []
    for enabled in (True, False):
        fast_path.enabled = enabled
        try:
            response = client.post(
                "/api/collect",
                content=body,
                headers={"content-type": "application/json", "x-api-key": key},
            )
            streamed = client.post(
                "/api/collect",
                content=iter([body[: cap // 2], body[cap // 2 :]]),
                headers={"content-type": "application/json", "x-api-key": key},
            )
        finally:
            fast_path.enabled = True
        answers.append(
            [
                (r.status_code, sorted(r.headers.multi_items()), r.content)
                for r in (response, streamed)
            ]
        )
    assert answers[0][0][0] == 413 and answers[0][1][0] == 413
    assert answers[0] == answers[1]

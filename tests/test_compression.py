"""Gzip on the wire (http/compression.py): the API's JSON and the CSV and NDJSON exports come
gzipped to a client that takes it, byte for byte the same once decompressed; a client that does
not (or says ``q=0``) gets them as before; the pages keep their own gzip, never twice; Parquet
and collect's 202 are sent as they are."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from conftest import auth, new_project
from served import Server
from tally.http.compression import STREAM_PIECE, accepts_gzip, gzip_stream

GZIP = {"accept-encoding": "gzip"}
PLAIN = {"accept-encoding": "identity"}


@pytest.mark.parametrize(
    ("header", "takes"),
    [
        ("gzip", True),
        ("gzip, deflate, br", True),
        ("br;q=1.0, gzip;q=0.8, *;q=0.1", True),
        ("x-gzip", True),
        ("*", True),
        ("GZIP", True),
        ("", False),
        ("identity", False),
        ("br, deflate", False),
        ("gzip;q=0", False),
        ("gzip; q=0.0", False),
        ("*;q=0", False),
        ("gzip;q=0, *", False),  # named: its own quality wins over the wildcard
        ("*, gzip;q=0", False),
        ("gzip;q=nonsense", False),
        ("gzipx", False),
    ],
)
def test_accept_encoding_is_read_with_its_qualities(header: str, takes: bool) -> None:
    assert accepts_gzip(header) is takes


def test_a_stream_is_one_gzip_member_in_pieces_of_a_useful_size() -> None:
    chunks = [bytes([i % 251]) * 10_000 + bytes(range(256)) * 40 for i in range(60)]
    closed = []

    def source():
        try:
            yield from chunks
        finally:
            closed.append(True)

    pieces = list(gzip_stream(source()))
    assert gzip.decompress(b"".join(pieces)) == b"".join(chunks)
    assert all(len(p) >= STREAM_PIECE for p in pieces[:-1])
    assert closed == [True]
    # Closed part-way (a client that went away): the source is closed too.
    closed.clear()
    stream = gzip_stream(source())
    next(stream)
    stream.close()
    assert closed == [True]
    assert gzip.decompress(b"".join(gzip_stream(iter(())))) == b""


def _numbers(body: bytes) -> dict[str, Any]:
    """A dashboard's JSON without its freshness watermark (the time of the request)."""
    answer = json.loads(body)
    answer.pop("dataThrough")
    return answer


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    server = Server(tmp_path_factory.mktemp("gzip"))
    try:
        yield server
    finally:
        server.stop()


def _wire(server: Server, path: str, headers: dict[str, str]) -> tuple[httpx.Response, bytes]:
    with (
        httpx.Client(base_url=server.url, timeout=60) as http,
        http.stream("GET", path, headers=headers) as response,
    ):
        return response, b"".join(response.iter_raw())


def test_json_pages_and_exports_travel_gzipped_and_arrive_the_same(served: Server) -> None:
    user = "gzip-owner"
    project, key = served.new_project(user, "Gzip")
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    events = [
        {
            "name": "pageview",
            "path": f"/p/{i % 40}",
            "visitorId": f"v{i % 97}",
            "sessionId": f"s{i % 300}",
            "occurredAt": (day - timedelta(days=i % 20, minutes=i)).isoformat(),
        }
        for i in range(600)
    ]
    with httpx.Client(base_url=served.url, timeout=60) as http:
        # collect's 202 is a few bytes, never compressed, whatever the client takes.
        sent = http.post(
            "/api/collect", json={"events": events[:1]}, headers={"x-api-key": key, **GZIP}
        )
        assert sent.status_code == 202 and "content-encoding" not in sent.headers
        # A new key's answer (a secret) is below the minimum size: never compressed.
        made = http.post(
            "/api/projects/keys", json={"projectId": project}, headers={**auth(user), **GZIP}
        )
        assert made.status_code == 201, made.text
        assert "content-encoding" not in made.headers
    served.collect(key, events[1:])
    a = {**auth(user)}
    dashboard = f"/api/dashboard?projectId={project}&days=30"
    zipped, wire = _wire(served, dashboard, {**a, **GZIP})
    plain, plain_wire = _wire(served, dashboard, {**a, **PLAIN})
    refused, refused_wire = _wire(served, dashboard, {**a, "accept-encoding": "gzip;q=0"})
    assert zipped.status_code == plain.status_code == refused.status_code == 200
    assert zipped.headers["content-encoding"] == "gzip"
    assert "accept-encoding" in zipped.headers["vary"].lower()
    assert int(zipped.headers["content-length"]) == len(wire) < len(plain_wire) / 2
    assert "content-encoding" not in plain.headers and "content-encoding" not in refused.headers
    assert _numbers(gzip.decompress(wire)) == _numbers(plain_wire) == _numbers(refused_wire)
    assert json.loads(plain_wire)["summary"]["totalEvents"] == len(events)

    # The tracker script: its own gzip form, once (a second pass would not decompress to JS).
    script, script_wire = _wire(served, "/tally.js", GZIP)
    _, script_plain = _wire(served, "/tally.js", PLAIN)
    assert script.headers["content-encoding"] == "gzip"
    assert gzip.decompress(script_wire) == script_plain

    first, last = (day - timedelta(days=25)).date(), day.date()
    for fmt in ("csv", "ndjson"):
        path = f"/api/export?projectId={project}&from={first}&to={last}&format={fmt}"
        zipped, wire = _wire(served, path, {**a, **GZIP})
        plain, plain_wire = _wire(served, path, {**a, **PLAIN})
        assert zipped.status_code == plain.status_code == 200
        assert zipped.headers["content-encoding"] == "gzip"
        assert "content-encoding" not in plain.headers
        assert gzip.decompress(wire) == plain_wire
        assert len(wire) < len(plain_wire) / 3
        assert plain_wire.count(b"\n") >= len(events)
        # HEAD says what the GET would send.
        with httpx.Client(base_url=served.url, timeout=60) as http:
            head = http.head(path, headers={**a, **GZIP})
        assert head.status_code == 200 and head.headers["content-encoding"] == "gzip"
    parquet, parquet_wire = _wire(
        served,
        f"/api/export?projectId={project}&from={first}&to={last}&format=parquet",
        {**a, **GZIP},
    )
    assert parquet.status_code == 200 and "content-encoding" not in parquet.headers
    assert parquet_wire[:4] == b"PAR1"


def test_the_test_client_reads_gzipped_answers_as_before(client: Any, user: str) -> None:
    """httpx (the test client) asks for gzip and decodes it: every other test reads the same
    JSON it read before, here checked against a request that refuses gzip."""
    project, _ = new_project(client, user)
    path = f"/api/dashboard?projectId={project}&days=90"
    zipped = client.get(path, headers={**auth(user), **GZIP})
    plain = client.get(path, headers={**auth(user), **PLAIN})
    assert zipped.headers.get("content-encoding") == "gzip"
    assert _numbers(zipped.content) == _numbers(plain.content)

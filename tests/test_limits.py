"""The body cap: the largest batch that validation accepts is admitted; one byte over the cap is
413 on every endpoint, refused before the body is read whole (declared length) or as soon as the
bytes received pass the cap (chunked)."""

from __future__ import annotations

import socket

import httpx
import msgspec
import pytest

from conftest import auth, new_project, stored
from served import Server
from tally.config import Settings
from tally.http.limits import SMALL_BODY_BYTES
from tally.http.schemas import collect_decoder

DEFAULT_CAP = Settings().max_body_bytes


def largest_valid_batch() -> bytes:
    """100 events at every field's maximum, in compact plain-ASCII JSON."""
    event = {
        "name": "n" * 100,
        "path": "/" + "p" * 2047,
        "url": "u" * 4096,
        "referrer": "r" * 4096,
        "sessionId": "s" * 200,
        "visitorId": "v" * 200,
        "occurredAt": "2026-11-23T10:00:00.000000+00:00",  # the longest form the pattern takes
        "metadata": {f"{i:03d}" + "k" * 97: "x" * 1024 for i in range(50)},
    }
    return msgspec.json.encode({"events": [event] * 100})


def padded(body: bytes, size: int) -> bytes:
    """``body`` grown to ``size`` bytes with JSON whitespace (still the same valid document)."""
    assert len(body) <= size
    return body[:-1] + b" " * (size - len(body)) + body[-1:]


def post_collect(client, key, content):
    return client.post(
        "/api/collect",
        content=content,
        headers={"x-api-key": key, "content-type": "application/json"},
    )


def test_the_largest_valid_batch_fits_under_the_default_cap(client):
    body = largest_valid_batch()
    collect_decoder.decode(body)  # valid by the contract's own rules
    assert len(body) == 6_737_612
    assert len(body) <= DEFAULT_CAP
    project_id, key = new_project(client, user="cap-owner")
    response = post_collect(client, key, body)
    assert (response.status_code, response.json()) == (202, {"accepted": 100})
    rows = stored(
        client, "SELECT count() FROM {db}.events WHERE project_id = {p:String}", p=project_id
    )
    assert rows == [(100,)]


def test_exactly_the_cap_is_read_and_one_byte_more_is_413(client):
    _, key = new_project(client, user="cap-owner-2")
    body = msgspec.json.encode({"events": [{"name": "pageview"}]})
    assert post_collect(client, key, padded(body, DEFAULT_CAP)).status_code == 202
    response = post_collect(client, key, padded(body, DEFAULT_CAP + 1))
    assert (response.status_code, response.json()) == (413, {"error": "Payload too large"})


@pytest.mark.parametrize("path", ["/api/projects", "/api/projects/keys"])
def test_small_endpoints_refuse_more_than_their_cap(client, path):
    body = msgspec.json.encode({"name": "Site"}) if path == "/api/projects" else b'{"label":"a"}'
    response = client.post(path, content=padded(body, SMALL_BODY_BYTES + 1), headers=auth("cap"))
    assert (response.status_code, response.json()) == (413, {"error": "Payload too large"})
    # 2 MB (read whole and answered 400 before the cap existed)
    response = client.post(path, content=padded(body, 2_000_000), headers=auth("cap"))
    assert response.status_code == 413


def test_the_cap_is_configurable(make_client):
    with make_client(max_body_bytes=1000) as client:
        _, key = new_project(client, user="owner")
        body = msgspec.json.encode({"events": [{"name": "pageview"}]})
        assert post_collect(client, key, padded(body, 1000)).status_code == 202
        assert post_collect(client, key, padded(body, 1001)).status_code == 413


# Requests without valid credentials, each way a credential can be missing or wrong.
WITHOUT_CREDENTIALS = [
    pytest.param("/api/collect", {}, id="collect, no key"),
    pytest.param("/api/collect", {"x-api-key": "tk_not-a-real-key"}, id="collect, unknown key"),
    pytest.param("/api/collect?apiKey=tk_not-a-real-key", {}, id="collect, key in the query"),
    pytest.param("/api/projects", {}, id="projects, no session"),
    pytest.param("/api/projects", {"authorization": "Bearer not.a.jwt"}, id="projects, bad token"),
    pytest.param("/api/projects/keys", {}, id="keys, no session"),
]


@pytest.mark.parametrize(("path", "headers"), WITHOUT_CREDENTIALS)
def test_a_declared_length_over_the_cap_is_413_before_the_credentials(client, path, headers):
    """The one rule (README, "Errors"): the headers are judged before any of the body is read,
    a declared length over the cap first (413 whoever sends it), then the credentials (401
    whatever the body under the cap)."""
    cap = DEFAULT_CAP if path.startswith("/api/collect") else SMALL_BODY_BYTES
    headers = {"content-type": "application/json", **headers}
    over = client.post(path, content=b" " * (cap + 1), headers=headers)
    assert (over.status_code, over.json()) == (413, {"error": "Payload too large"})
    under = client.post(path, content=b" " * cap, headers=headers)
    assert under.status_code == 401, under.text
    assert under.json()["error"] in ("Unauthorized", "Missing API key", "Invalid API key")


# --- a real server: refused before the body is read ------------------------------------------
def raw_request(port: int, head: bytes, chunks: list[bytes]) -> bytes:
    """Send ``head`` then ``chunks`` (stopping if the server has answered and closed); return
    what the server answered."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        for chunk in chunks:
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
        sock.settimeout(30)
        answer = b""
        while b"\r\n\r\n" not in answer:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            answer += data
        return answer


def serve_with_cap(tmp_path_factory, cap: str) -> Server:
    """A ``tally serve`` with TALLY_MAX_BODY_BYTES=cap and a project (``key``, ``project``)."""
    served = Server(tmp_path_factory.mktemp("cap"), TALLY_MAX_BODY_BYTES=cap)
    created = httpx.post(f"{served.url}/api/projects", json={"name": "cap"}, headers=auth("cap"))
    served.key = created.json()["apiKey"]
    served.project = created.json()["projectId"]
    return served


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    served = serve_with_cap(tmp_path_factory, "100000")
    yield served
    served.stop()


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/api/collect", "/api/projects", "/api/projects/keys"])
def test_a_declared_length_over_the_cap_is_refused_without_reading_the_body(server, path):
    # The body is never sent: the server answers from the headers alone.
    head = (
        f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"x-api-key: tk_x\r\ncontent-length: {10**9}\r\n\r\n"
    ).encode()
    answer = raw_request(server.port, head, [])
    assert answer.startswith(b"HTTP/1.1 413"), answer


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/api/collect", "/api/projects"])
def test_a_chunked_body_is_cut_off_when_it_passes_the_cap(server, path):
    head = (
        f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"x-api-key: {server.key}\r\nauthorization: {auth('cap')['authorization']}\r\n"
        "transfer-encoding: chunked\r\n\r\n"
    ).encode()
    chunk = b" " * 8192
    framed = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    # 20 MB offered; the answer comes after a little more than the cap.
    answer = raw_request(server.port, head, [framed] * 2500)
    assert answer.startswith(b"HTTP/1.1 413"), answer


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/api/collect", "/api/projects"])
def test_without_credentials_a_chunked_body_is_never_read(server, path):
    """No length declared, no valid credentials: 401 from the headers alone. Not a byte of the
    body is sent, so a server that waited for it would answer 408 after the body deadline."""
    head = (
        f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        "x-api-key: tk_not-a-real-key\r\ntransfer-encoding: chunked\r\n\r\n"
    ).encode()
    answer = raw_request(server.port, head, [])
    assert answer.startswith(b"HTTP/1.1 401"), answer


# --- TALLY_MAX_BODY_BYTES=0: collect's cap off, the other endpoints keep theirs ----------------
@pytest.fixture(scope="module")
def uncapped(tmp_path_factory):
    served = serve_with_cap(tmp_path_factory, "0")
    yield served
    served.stop()


@pytest.mark.slow
def test_zero_turns_off_collects_cap_and_the_other_endpoints_keep_64_kib(uncapped):
    """README: "0 turns collect's cap off (the other endpoints keep their 64 KiB)". Before, 0
    lifted every cap: a 30 MB POST /api/projects was read whole and answered 400."""
    url = uncapped.url
    # Collect takes a body over the default cap.
    body = msgspec.json.encode({"events": [{"name": "pageview"}]})
    big = padded(body, DEFAULT_CAP + 1)
    sent = httpx.post(
        f"{url}/api/collect",
        content=big,
        headers={"x-api-key": uncapped.key, "content-type": "application/json"},
        timeout=60,
    )
    assert (sent.status_code, sent.json()) == (202, {"accepted": 1})
    # The other endpoints: 64 KiB, with a valid session; one byte more is 413.
    project = msgspec.json.encode({"name": "Site"})
    headers = {**auth("cap"), "content-type": "application/json"}
    at_cap = httpx.post(
        f"{url}/api/projects", content=padded(project, SMALL_BODY_BYTES), headers=headers
    )
    assert at_cap.status_code == 201, at_cap.text
    over = httpx.post(
        f"{url}/api/projects", content=padded(project, SMALL_BODY_BYTES + 1), headers=headers
    )
    assert (over.status_code, over.json()) == (413, {"error": "Payload too large"})
    # Refused from the declared length alone, before the credentials and the body.
    for path in ("/api/projects", "/api/projects/keys"):
        head = (
            f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            f"content-length: {30 * 10**6}\r\n\r\n"
        ).encode()
        answer = raw_request(uncapped.port, head, [])
        assert answer.startswith(b"HTTP/1.1 413"), answer
    # A chunked body is cut off once past 64 KiB.
    head = (
        f"POST /api/projects HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"authorization: {auth('cap')['authorization']}\r\ntransfer-encoding: chunked\r\n\r\n"
    ).encode()
    chunk = b" " * 8192
    framed = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    assert raw_request(uncapped.port, head, [framed] * 2500).startswith(b"HTTP/1.1 413")
    # The OpenAPI document says what applies.
    document = httpx.get(f"{url}/api/schema/openapi.json").json()["info"]["description"]
    [row] = [line for line in document.splitlines() if line.startswith("| request body |")]
    assert "set to 0: no cap on collect" in row
    assert "64 KiB on the other endpoints" in row
    assert "0 bytes" not in row and "MiB" not in row and "default" not in row


def test_a_cap_under_64_kib_is_every_endpoints_and_the_document_says_so(make_client):
    """The other endpoints take 64 KiB or TALLY_MAX_BODY_BYTES when lower, and the OpenAPI
    document names the lower figure (it said "64 KiB on the other endpoints" while 1000 bytes
    applied)."""
    headers = {**auth("owner"), "content-type": "application/json"}
    with make_client(max_body_bytes=1000) as client:
        project = msgspec.json.encode({"name": "Site"})
        created = client.post("/api/projects", content=padded(project, 1000), headers=headers)
        assert created.status_code == 201, created.text
        over = client.post("/api/projects", content=padded(project, 1001), headers=headers)
        assert (over.status_code, over.json()) == (413, {"error": "Payload too large"})
        # (the app's own document: Litestar caches the served JSON per process, of the first app)
        document = client.app.openapi_schema.to_schema()["info"]["description"]
        [row] = [line for line in document.splitlines() if line.startswith("| request body |")]
        assert "set to 1,000 bytes on collect" in row
        assert "1,000 bytes on the other endpoints too" in row
        assert "64 KiB on the other endpoints;" not in row
        assert "MiB" not in row and "default" not in row

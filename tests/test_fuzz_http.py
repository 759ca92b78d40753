"""Hostile requests to a real ``tally serve`` (embedded engine, real process, raw sockets where an
HTTP client would tidy the bytes away): each one is a 4xx in the contract's JSON shape, never a
500 or a dropped connection. Found by fuzzing every route of the running server."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import socket
import time

import httpx
import pytest

from conftest import JWT_SECRET, token
from served import Server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    running = Server(tmp_path_factory.mktemp("fuzz"))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def owned(server):
    project_id, key = server.new_project("fuzzer", "Fuzzed")
    return project_id, key


def exchange(server: Server, request: bytes, timeout: float = 30) -> tuple[int, bytes, bytes]:
    """(status, head, body) of the answer to the raw bytes ``request``."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as sock:
        sock.sendall(request)
        answer = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head else 0
    return status, head, body


def signed(payload: bytes, secret: str = JWT_SECRET) -> str:
    """An HS256 token over the exact JSON bytes ``payload`` (claims no JSON library writes)."""

    def part(raw: bytes) -> bytes:
        return base64.urlsafe_b64encode(raw).rstrip(b"=")

    head = part(b'{"alg":"HS256","typ":"JWT"}') + b"." + part(payload)
    signature = hmac.new(secret.encode(), head, hashlib.sha256).digest()
    return (head + b"." + part(signature)).decode()


HUGE = b"1" + b"0" * 400  # an integer no double holds (1e400 as a float is infinite)


@pytest.mark.parametrize(
    "claims",
    [
        b'{"sub":"u1","exp":%s}' % HUGE,
        b'{"sub":"u1","exp":%%d,"iat":-%s}' % HUGE,
        b'{"sub":"u1","exp":%%d,"nbf":-%s}' % HUGE,
    ],
    ids=["exp", "iat", "nbf"],
)
@pytest.mark.parametrize("how", ["bearer", "cookie"])
def test_a_session_token_with_a_time_claim_past_any_double_is_a_401(server, owned, claims, how):
    project_id, _ = owned
    if b"%d" in claims:
        claims = claims % (int(time.time()) + 600)
    session = signed(claims)
    headers = (
        {"authorization": f"Bearer {session}"}
        if how == "bearer"
        else {"cookie": f"tally_session={session}"}
    )
    for path in ("/api/projects", f"/api/dashboard?projectId={project_id}"):
        answer = httpx.get(server.url + path, headers=headers, timeout=30)
        assert answer.status_code == 401, (path, answer.status_code, answer.text)
        assert answer.json() == {"error": "Unauthorized"}


def chunked(path: str, headers: list[bytes], body: bytes) -> bytes:
    return (
        b"POST " + path.encode() + b" HTTP/1.1\r\nHost: tally\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
        + b"".join(h + b"\r\n" for h in headers)
        + b"\r\n"
        + body
    )


BROKEN_CHUNKS = {
    "size not hex": b"zz\r\n{}\r\n0\r\n\r\n",
    "chunk longer than its size": b'2\r\n{"events":[]}\r\n0\r\n\r\n',
    "size past any length": b"ffffffffffffffffffff\r\n{}\r\n0\r\n\r\n",
}


@pytest.mark.parametrize("case", list(BROKEN_CHUNKS))
@pytest.mark.parametrize("endpoint", ["collect", "collect (cors)", "projects", "v2 query"])
def test_a_malformed_chunked_body_is_a_400_never_a_500(server, owned, endpoint, case):
    _, key = owned
    session = f"Authorization: Bearer {token('fuzzer')}".encode()
    path, headers = {
        "collect": ("/api/collect", [b"x-api-key: " + key.encode()]),
        "collect (cors)": (
            "/api/collect",
            [b"x-api-key: " + key.encode(), b"Origin: https://site.example"],
        ),
        "projects": ("/api/projects", [session]),
        "v2 query": ("/api/v2/query", [session]),
    }[endpoint]
    status, head, body = exchange(server, chunked(path, headers, BROKEN_CHUNKS[case]))
    assert status == 400, (status, head, body)
    assert re.search(rb"(?im)^content-type: application/json", head), head
    answer = json.loads(body)
    assert answer["error"] == "Invalid payload", answer
    assert answer["details"][0]["path"] == "$"
    # The server still answers.
    assert httpx.get(f"{server.url}/api/health", timeout=30).status_code == 200


def test_a_parameter_the_dashboard_does_not_take_is_ignored_whatever_its_value(server, owned):
    """Unknown parameters are ignored (``format=xml``, ``limit=5000``); ``limit`` is breakdown's,
    and the dashboard refused it only when it was not written in digits."""
    project_id, _ = owned
    headers = {"authorization": f"Bearer {token('fuzzer')}"}
    for extra in ({"format": "xml"}, {"limit": "5000"}, {"limit": "-5"}, {"limit": "ten"}):
        answer = httpx.get(
            f"{server.url}/api/dashboard",
            params={"projectId": project_id, **extra},
            headers=headers,
            timeout=60,
        )
        assert answer.status_code == 200, (extra, answer.text)
